package demo

// The demo's real desktop: usher serve --demo runs a session host on its
// own machine for the machines of DesktopGroup (internal/server), whose
// sessions open in the portal's page. Its users are the engineering
// group's, whom the group's entitlement names.
const (
	// DesktopGroup is the delivery group whose machines the demo's
	// session host serves; DesktopResource is its desktop, the one to
	// open.
	DesktopGroup    = PooledDesktops
	DesktopResource = PooledDesktop
	// DesktopUser is a user entitled to DesktopResource.
	DesktopUser = "user0001"
	// DesktopColour is the desktop's background.
	DesktopColour = "#1f6feb"
	// DesktopCommand is the desktop of a demo session, a /bin/sh command
	// line run as the demo's account on the session's display: a blue
	// background, and an xterm when it is installed, else a note (with
	// xmessage, when that is) saying how to get one. It checks at each
	// session, so that installing xterm needs no restart.
	DesktopCommand = `command -v xsetroot >/dev/null && xsetroot -solid '` + DesktopColour + `'
if command -v xterm >/dev/null; then exec xterm -geometry 100x30+24+24 -title 'usher demo session'; fi
command -v xmessage >/dev/null && exec xmessage -center 'An usher demo session. For a terminal here: apt-get install xterm, then open the desktop again.'`
)
