package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/usher-vdi/usher/internal/display/xvnc"
	"github.com/usher-vdi/usher/internal/tlsconf"
	"github.com/usher-vdi/usher/internal/vda"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// DefaultVDAListen is the control listener of a VDA agent.
const DefaultVDAListen = ":8490"

// envEnrolmentSecret holds the enrolment secret when no file names it.
const envEnrolmentSecret = "USHER_ENROLMENT_SECRET"

type vdaFlags struct {
	broker, fallback, secretFile, listen string
	heartbeat                            time.Duration
	logs                                 logFlags

	// TLS: brokers' CA, the control listener's certificate, and the
	// clear exceptions.
	brokerCA, tlsCert, tlsKey      string
	insecureBroker, insecureListen bool

	// The agent.
	machine, address, protocol, controlURL, sessionCommand, stateFile string
	maxSessions                                                       int
	enrolmentToken                                                    string

	// The sessions' displays.
	display, displayAccount, xvncProgram, displayGeometry, displayCommand string
	displayOrigins                                                        multiFlag

	// The simulator.
	simulate                              string
	machines, prefix, catalog, group      string
	logonDelay, sessionLen, sessionJitter time.Duration
	manualConnect                         bool

	set map[string]bool // the flags given
}

var (
	agentOnlyFlags = []string{"machine", "address", "protocol", "control-url", "session-command", "state-file", "max-sessions", "enrolment-token",
		"tls-cert", "tls-key", "display", "display-account", "xvnc", "display-geometry", "display-command", "display-origin"}
	// displayFlags are the flags that need --display.
	displayFlags = []string{"display-account", "xvnc", "display-geometry", "display-command", "display-origin"}
	simOnlyFlags = []string{"machines", "machine-prefix", "catalog", "delivery-group", "logon-delay", "session-length", "session-jitter", "manual-connect"}
)

func (m *Main) vda(ctx context.Context, args []string) error {
	var f vdaFlags
	fs := m.flagSet("vda", "--broker URL --machine NAME [--address HOST:PORT] [--session-command CMD] [flags]\n"+
		"       usher vda --simulate all|N --broker URL [--catalog C] [--delivery-group G] [--machine-prefix P | --machines A,B,...] [flags]\n\n"+
		"The enrolment secret comes from --enrolment-secret-file or $"+envEnrolmentSecret+"; usher serve\n"+
		"creates it as enrolment.secret in its data directory (default ~/.local/state/usher).\n\n"+
		vdaSessionHelp+
		"\nThe simulator asks the broker for the site's machine names (with the enrolment secret)\n"+
		"and plays all of them, or the first N, of the catalog, delivery group or name prefix given.")
	fs.StringVar(&f.broker, "broker", "", "base URL of the broker, e.g. https://broker:8443, or of the brokers of the machine's zone separated by commas, used in turn as one stops answering (required; http:// only on loopback unless --insecure-broker)")
	fs.StringVar(&f.fallback, "fallback-broker", "", "comma-separated base URLs of primary-zone brokers, used only while none of --broker answers (the zone must have primary_fallback)")
	fs.StringVar(&f.secretFile, "enrolment-secret-file", "", "file holding the site's enrolment secret (else $"+envEnrolmentSecret+")")
	fs.StringVar(&f.listen, "listen", "", "address of the control listener (default "+DefaultVDAListen+", or "+vda.DefaultSimListen+" with --simulate); off loopback it needs --tls-cert and --tls-key, or --insecure-listen")
	fs.StringVar(&f.brokerCA, "broker-ca", "", "PEM file of the CA certificates that sign the brokers' certificates (default: the system roots)")
	fs.BoolVar(&f.insecureBroker, "insecure-broker", false, "allow http:// broker URLs off loopback (the machine credential crosses the network in clear)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate (chain) of the control listener, loaded again when it changes or on SIGHUP; brokers pin it at registration (agent)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM private key of --tls-cert (agent)")
	fs.BoolVar(&f.insecureListen, "insecure-listen", false, "allow a clear control listener off loopback (the control token crosses the network in clear; brokers send it only if their site allows)")
	fs.DurationVar(&f.heartbeat, "heartbeat-interval", 0, "heartbeat this often instead of as the broker says")
	f.logs.register(fs)

	fs.StringVar(&f.machine, "machine", "", "this machine's name in the site (agent; required)")
	fs.StringVar(&f.address, "address", "", "where clients reach the display protocol, HOST:PORT (agent; default: the site's address of the machine)")
	fs.StringVar(&f.protocol, "protocol", "rdp", "display protocol: rdp or ica (agent)")
	fs.StringVar(&f.controlURL, "control-url", "", "URL where the broker reaches the control listener (agent; default https://HOST:PORT of --listen with --tls-cert, else http://, with --address's host or this host's name for a wildcard --listen)")
	fs.StringVar(&f.sessionCommand, "session-command", "", "command run, without a shell, when a session is prepared, logged off or disconnected; it gets USHER_EVENT, USHER_SESSION_ID, USHER_USER, USHER_RESOURCE and USHER_COMMAND_LINE (agent)")
	fs.StringVar(&f.enrolmentToken, "enrolment-token", "", "a single-use machine enrolment token (usher admin enrol-token MACHINE) "+
		"instead of the site's enrolment secret; the agent renews its credential from then on (agent)")
	fs.StringVar(&f.stateFile, "state-file", "", "file (0600) that keeps the sessions and the machine credential across agent restarts, so that a token-enrolled agent registers again without a new token (agent)")
	fs.IntVar(&f.maxSessions, "max-sessions", 0, "most sessions this host takes; 0 leaves it to the site's load rules (agent)")
	fs.StringVar(&f.display, "display", "none", "the sessions' display: none, or xvnc to start a TigerVNC Xvnc per session when it is prepared "+
		"and serve it to the session's ticket as a WebSocket at the control URL's "+vdaproto.PathDisplay+" (the machine registers protocol vnc) (agent)")
	fs.StringVar(&f.displayAccount, "display-account", "", "run every session's display as this Unix account (hosts without directory accounts, demos); "+
		"default: the account named after the session's user, DOMAIN\\name and name@domain as name (agent, --display)")
	fs.StringVar(&f.xvncProgram, "xvnc", xvnc.DefaultProgram, "the Xvnc to run, a path or a name in $PATH (agent, --display xvnc)")
	fs.StringVar(&f.displayGeometry, "display-geometry", xvnc.DefaultGeometry, "size of a session's display, WxH; a viewer may resize it (agent, --display)")
	fs.StringVar(&f.displayCommand, "display-command", "", "shell command line of the desktop, run on the display of a session without a command line of its own, "+
		"e.g. 'xsetroot -solid \"#1f6feb\"; exec xterm' (agent, --display)")
	fs.Var(&f.displayOrigins, "display-origin", "origin of a web page that may open the displays, a host or scheme://host pattern "+
		"(https://portal.example.com, *.example.com); repeat it or separate with commas. A request without Origin (usher's gateway) needs none (agent, --display)")

	fs.StringVar(&f.simulate, "simulate", "", "run simulated VDAs instead of the agent: all of the site's machines (of the catalog, group or prefix given), or the first N")
	fs.StringVar(&f.catalog, "catalog", "", "simulate the machines of this catalog")
	fs.StringVar(&f.group, "delivery-group", "", "simulate the machines of this delivery group")
	fs.StringVar(&f.prefix, "machine-prefix", "", "simulate the site's machines whose names begin with this, e.g. office-vda")
	fs.StringVar(&f.machines, "machines", "", "comma-separated names of the machines to simulate; the first N with --simulate N")
	fs.DurationVar(&f.logonDelay, "logon-delay", vda.DefaultLogonDelay, "time from prepare to the simulated client's arrival")
	fs.DurationVar(&f.sessionLen, "session-length", 0, "simulated users log off after this long; 0: when the broker or user logs them off")
	fs.DurationVar(&f.sessionJitter, "session-jitter", 0, "spread of the session length, plus or minus")
	fs.BoolVar(&f.manualConnect, "manual-connect", false, "no simulated clients: sessions wait for a client to present its ticket at /connect")
	configFlag(fs)
	if err := parse(fs, args, 0); err != nil {
		return err
	}

	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	f.set = set
	if f.broker == "" {
		return usageError{"--broker URL is required"}
	}
	if f.heartbeat < 0 {
		return usageError{"--heartbeat-interval must not be negative"}
	}
	var secret string
	if f.enrolmentToken == "" || f.secretFile != "" {
		var err error
		if secret, err = m.enrolmentSecret(f.secretFile); err != nil {
			return err
		}
	}
	if set["simulate"] {
		if name := firstSet(set, agentOnlyFlags); name != "" {
			return usageError{fmt.Sprintf("--%s is for the agent, not with --simulate", name)}
		}
		return m.runSimulator(ctx, f, secret)
	}
	if name := firstSet(set, simOnlyFlags); name != "" {
		return usageError{fmt.Sprintf("--%s needs --simulate", name)}
	}
	return m.runAgent(ctx, f, secret)
}

func firstSet(set map[string]bool, names []string) string {
	for _, n := range names {
		if set[n] {
			return n
		}
	}
	return ""
}

// enrolmentSecret reads the secret from file, else from the environment.
func (m *Main) enrolmentSecret(file string) (string, error) {
	if file == "" {
		s := strings.TrimSpace(m.Getenv(envEnrolmentSecret))
		if s == "" {
			return "", usageError{"the enrolment secret is required: --enrolment-secret-file FILE or $" + envEnrolmentSecret}
		}
		return s, nil
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read enrolment secret: %w", err)
	}
	s := strings.TrimSpace(string(raw))
	if s == "" {
		return "", fmt.Errorf("enrolment secret file %s is empty", file)
	}
	if fi, err := os.Stat(file); err == nil && fi.Mode().Perm()&0o077 != 0 {
		fmt.Fprintf(m.Stderr, "usher vda: warning: %s is readable by others than its owner (mode %v)\n", file, fi.Mode().Perm())
	}
	return s, nil
}

func (m *Main) runSimulator(ctx context.Context, f vdaFlags, secret string) error {
	count := 0 // all
	if f.simulate != "all" {
		n, err := strconv.Atoi(f.simulate)
		if err != nil || n < 1 {
			return usageError{fmt.Sprintf("--simulate %q: want all, or a number of machines of at least 1", f.simulate)}
		}
		count = n
	}
	var listed []string
	if f.machines != "" {
		if f.prefix != "" || f.catalog != "" || f.group != "" {
			return usageError{"--machines names the machines; it excludes --machine-prefix, --catalog and --delivery-group"}
		}
		for n := range strings.SplitSeq(f.machines, ",") {
			if n = strings.TrimSpace(n); n != "" {
				listed = append(listed, n)
			}
		}
		if len(listed) == 0 {
			return usageError{"--machines names no machine"}
		}
	}
	if f.logonDelay < 0 || f.sessionLen < 0 || f.sessionJitter < 0 {
		return usageError{"--logon-delay, --session-length and --session-jitter must not be negative"}
	}
	logonDelay := f.logonDelay
	if logonDelay == 0 {
		logonDelay = -1 // at once; 0 would mean the default
	}
	log, err := f.logs.logger(m.Stderr)
	if err != nil {
		return err
	}
	brokerTLS, err := tlsconf.ClientConfig("--broker-ca", f.brokerCA)
	if err != nil {
		return usageError{err.Error()}
	}
	names, err := simulatedNames(ctx, f, brokerTLS, secret, listed, count, log)
	if err != nil {
		return err
	}
	listen := orDefault(f.listen, vda.DefaultSimListen)
	if err := tlsconf.CheckListen("--listen", listen, false, f.insecureListen); err != nil {
		return usageError{simPlainHint(err)}
	}
	if f.insecureListen && !tlsconf.LoopbackAddr(listen) {
		m.warnPlainListener(log, listen)
	}
	sim, err := vda.NewSimulator(vda.SimConfig{
		Broker: f.broker, FallbackBroker: f.fallback, BrokerTLS: brokerTLS, InsecureBroker: f.insecureBroker,
		Secret: secret, Machines: names, Listen: listen,
		LogonDelay: logonDelay, SessionLength: f.sessionLen, SessionJitter: f.sessionJitter,
		ManualConnect: f.manualConnect, HeartbeatInterval: f.heartbeat, Logger: log,
		Listening: func(addr string) {
			if m.Listening != nil {
				m.Listening("vda", addr)
			}
		},
	})
	if err != nil {
		return usageError{err.Error()}
	}
	return sim.Run(ctx)
}

// simulatedNames asks the broker for the site's machines that the flags
// select, and returns them, or the first count of them (count 0: all).
// Names listed with --machines must all be the site's.
func simulatedNames(ctx context.Context, f vdaFlags, brokerTLS *tls.Config, secret string, listed []string, count int, log *slog.Logger) ([]string, error) {
	client, err := vda.NewClient(vda.ClientConfig{BrokerURL: f.broker, FallbackURL: f.fallback, TLS: brokerTLS,
		InsecureBroker: f.insecureBroker, Logger: log})
	if err != nil {
		return nil, usageError{err.Error()}
	}
	defer client.CloseIdleConnections()
	site, err := client.Machines(ctx, vdaproto.MachinesRequest{Secret: secret, Catalog: f.catalog, DeliveryGroup: f.group, Prefix: f.prefix})
	if errors.Is(err, vda.ErrUnauthorized) {
		return nil, fmt.Errorf("%w (the broker refused the enrolment secret)", err)
	}
	if err != nil {
		return nil, err
	}
	var sel []string
	if f.catalog != "" {
		sel = append(sel, "of catalog "+strconv.Quote(f.catalog))
	}
	if f.group != "" {
		sel = append(sel, "of delivery group "+strconv.Quote(f.group))
	}
	if f.prefix != "" {
		sel = append(sel, "whose names begin with "+strconv.Quote(f.prefix))
	}
	which := "machines " + strings.Join(sel, " and ") // "machines " alone without filters
	has := "the site has"
	if listed != nil {
		known := map[string]bool{}
		for _, n := range site {
			known[n] = true
		}
		var unknown []string
		for _, n := range listed {
			if !known[n] {
				unknown = append(unknown, n)
			}
		}
		if len(unknown) > 0 {
			return nil, fmt.Errorf("--machines: the site has no machine %s", strings.Join(unknown, ", "))
		}
		site, has, which = listed, "--machines names", "machines"
	}
	which = strings.TrimSpace(which)
	switch {
	case len(site) == 0:
		return nil, fmt.Errorf("%s no %s to simulate", has, which)
	case count > len(site):
		return nil, fmt.Errorf("--simulate %d, but %s only %d %s (--simulate all takes them all)", count, has, len(site), which)
	case count > 0:
		site = site[:count]
	}
	return site, nil
}

func (m *Main) runAgent(ctx context.Context, f vdaFlags, secret string) error {
	if f.machine == "" {
		return usageError{"--machine NAME is required (or --simulate N)"}
	}
	if f.maxSessions < 0 {
		return usageError{"--max-sessions must not be negative"}
	}
	if f.address != "" {
		if _, _, err := net.SplitHostPort(f.address); err != nil {
			return usageError{fmt.Sprintf("--address %q is not HOST:PORT", f.address)}
		}
	}
	log, err := f.logs.logger(m.Stderr)
	if err != nil {
		return err
	}
	displays, origins, err := agentDisplays(f, log)
	if err != nil {
		return err
	}
	protocol := f.protocol
	if displays != nil {
		protocol = vdaproto.ProtocolVNC
	}
	var hook vda.SessionHook
	if f.sessionCommand != "" {
		h, err := vda.ParseCommand(f.sessionCommand)
		if err != nil {
			return usageError{err.Error()}
		}
		hook = h
	}
	brokerTLS, err := tlsconf.ClientConfig("--broker-ca", f.brokerCA)
	if err != nil {
		return usageError{err.Error()}
	}
	client, err := vda.NewClient(vda.ClientConfig{BrokerURL: f.broker, FallbackURL: f.fallback, TLS: brokerTLS,
		InsecureBroker: f.insecureBroker, Logger: log})
	if err != nil {
		return usageError{err.Error()}
	}
	listen := orDefault(f.listen, DefaultVDAListen)
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return usageError{"--tls-cert and --tls-key go together"}
	}
	var certs *tlsconf.Reloader
	if f.tlsCert != "" {
		if certs, err = tlsconf.NewReloader(f.tlsCert, f.tlsKey, log); err != nil {
			return usageError{err.Error()}
		}
	}
	if err := tlsconf.CheckListen("--listen", listen, certs != nil, f.insecureListen); err != nil {
		return usageError{err.Error()}
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listen, err)
	}
	defer ln.Close()
	controlURL := f.controlURL
	if controlURL == "" {
		if controlURL, err = defaultControlURL(ln.Addr().String(), f.address, certs != nil); err != nil {
			return err
		}
	}
	if err := checkControlURL(controlURL, certs != nil); err != nil {
		return usageError{err.Error()}
	}
	var pin func() string
	if certs != nil {
		pin = func() string { return tlsconf.Fingerprint(certs.Current().Raw) }
	} else if !tlsconf.LoopbackAddr(listen) {
		m.warnPlainListener(log, listen)
	}
	machine, err := vda.NewMachine(vda.MachineConfig{
		Name: f.machine, Client: client, Secret: secret, EnrolmentToken: f.enrolmentToken, ControlURL: controlURL, ControlPin: pin,
		Address: f.address, Protocol: protocol, MaxSessions: f.maxSessions,
		Load: &vda.ProcLoad{}, Hook: hook, Display: displays, DisplayOrigins: origins, HeartbeatInterval: f.heartbeat,
		StateFile: f.stateFile, Logger: log,
	})
	if err != nil {
		return usageError{err.Error()}
	}
	if certs != nil {
		ln = tls.NewListener(ln, certs.ServerConfig())
		stop := reloadOnHangup(certs, machine, log)
		defer stop()
	}
	attrs := []any{"machine", f.machine, "broker", f.broker, "listen", ln.Addr().String(), "control_url", controlURL}
	if pin != nil {
		attrs = append(attrs, "control_pin", pin())
	}
	if displays != nil {
		attrs = append(attrs, "display", f.display, "display_url", controlURL+vdaproto.PathDisplay)
	}
	log.Info("VDA agent starting", attrs...)
	if m.Listening != nil {
		m.Listening("vda", ln.Addr().String())
	}
	return vda.RunAgent(ctx, machine, ln)
}

// agentDisplays returns the sessions' displays the flags ask for (nil
// for --display none) and the allowed origins of their pages.
func agentDisplays(f vdaFlags, log *slog.Logger) (vda.DisplayStarter, []string, error) {
	var origins []string
	for _, v := range f.displayOrigins {
		for o := range strings.SplitSeq(v, ",") {
			if o = strings.TrimSpace(o); o != "" {
				origins = append(origins, o)
			}
		}
	}
	switch f.display {
	case "none":
		if name := firstSet(f.set, displayFlags); name != "" {
			return nil, nil, usageError{fmt.Sprintf("--%s needs --display xvnc", name)}
		}
		return nil, nil, nil
	case "xvnc":
	default:
		return nil, nil, usageError{fmt.Sprintf("--display %q: want none or xvnc", f.display)}
	}
	if f.set["protocol"] && f.protocol != vdaproto.ProtocolVNC {
		return nil, nil, usageError{fmt.Sprintf("--protocol %s: a machine with --display xvnc speaks vnc", f.protocol)}
	}
	st, err := xvnc.New(xvnc.Config{Program: f.xvncProgram, Geometry: f.displayGeometry, DesktopCommand: f.displayCommand,
		Account: f.displayAccount, MaxDisplays: f.maxSessions, Logger: log})
	if errors.Is(err, xvnc.ErrNotInstalled) {
		return nil, nil, fmt.Errorf("--display xvnc: %w; or give its path with --xvnc", err)
	}
	if err != nil {
		return nil, nil, usageError{"--display xvnc: " + err.Error()}
	}
	return st, origins, nil
}

// warnPlainListener says loudly that a control listener off loopback
// speaks clear HTTP.
func (m *Main) warnPlainListener(log *slog.Logger, listen string) {
	fmt.Fprintf(m.Stderr, "usher vda: WARNING: the control listener %s speaks clear HTTP off loopback (--insecure-listen): "+
		"anyone on the network reads the control token and the tickets' hashes, and brokers send no token to it unless their site allows clear control URLs\n", listen)
	log.Warn("control listener without TLS off loopback (--insecure-listen)", "listen", listen)
}

// simPlainHint is CheckListen's refusal for the simulator, which serves
// no TLS: it names --insecure-listen alone.
func simPlainHint(err error) string {
	return strings.Replace(err.Error(), "give it --tls-cert and --tls-key, or pass --insecure-listen",
		"the simulator serves no TLS: listen on loopback, or pass --insecure-listen", 1)
}

// checkControlURL refuses a control URL whose scheme is not the
// listener's: https with TLS, http without.
func checkControlURL(controlURL string, hasTLS bool) error {
	u, err := url.Parse(controlURL)
	if err != nil {
		return fmt.Errorf("--control-url %q: %v", controlURL, err)
	}
	switch {
	case hasTLS && u.Scheme != "https":
		return fmt.Errorf("--control-url %q: the control listener speaks TLS (--tls-cert): want https://", controlURL)
	case !hasTLS && u.Scheme == "https":
		return fmt.Errorf("--control-url %q: the control listener has no TLS: give it --tls-cert and --tls-key", controlURL)
	}
	return nil
}

// reloadOnHangup loads the control listener's certificate again on
// SIGHUP, and has the machine register the new pin; stop ends it.
func reloadOnHangup(certs *tlsconf.Reloader, machine *vda.Machine, log *slog.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-done:
				return
			case <-hup:
				if err := certs.Reload(); err != nil {
					log.Error("SIGHUP: the control listener's certificate is not reloaded; keeping the one in use", "err", err)
					continue
				}
				machine.ControlCertChanged()
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
		<-exited
	}
}

// defaultControlURL is http://HOST:PORT of the listener (https:// with
// TLS), with the host of the display address, or this host's name, when
// the listener listens on every address.
func defaultControlURL(listenAddr, displayAddr string, hasTLS bool) (string, error) {
	host, port, err := net.SplitHostPort(listenAddr)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = ""
		if displayAddr != "" {
			host, _, _ = net.SplitHostPort(displayAddr)
		}
		if host == "" {
			if host, err = os.Hostname(); err != nil {
				return "", fmt.Errorf("name the control URL with --control-url: %w", err)
			}
		}
	}
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(host, port)}
	if hasTLS {
		u.Scheme = "https"
	}
	return u.String(), nil
}

func orDefault(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

// vdaSessionHelp is the life of a session on a real host, for usher vda -h;
// the README's VDAs section says the same.
const vdaSessionHelp = `The life of a session on a real host:
  1. A user launches; the broker picks this machine and POSTs the session to the
     agent's control URL (/prepare, with the control token the agent registered).
  2. The agent runs --session-command (split at spaces, no shell, 10s at most) with
     no extra arguments and, in its environment, USHER_EVENT=prepare,
     USHER_SESSION_ID, USHER_USER (the user's name), USHER_RESOURCE and
     USHER_COMMAND_LINE. A non-zero exit refuses the session: the broker tries
     another machine. The session is now pending.
  3. The user's client gets a single-use ticket (90s) from the launch; the launch
     file carries it (RDP: loadbalanceinfo:s:usher-ticket:TICKET, ICA: LogonTicket).
     Whoever receives it on the host side (the display protocol's logon hook, a
     gateway, or the client itself) presents it to the agent:
       curl --cacert CA.pem -X POST -H 'Content-Type: application/json' \
         -d '{"ticket":"TICKET","client_name":"laptop-42"}' https://VDA:8490/connect
     which answers {"session_id":...,"user":...,"resource":...}. The session turns
     active and the broker hears of the logon. A ticket never presented leaves the
     session pending; 30s after the ticket expires both sides forget it (the
     command runs with USHER_EVENT=logoff).
  4. A disconnect or logoff the user asks of the broker (POST
     /api/v1/sessions/ID/disconnect or /logoff, or NFuse) reaches the agent at
     /disconnect or /logoff; the command runs with USHER_EVENT=disconnect or
     logoff (a non-zero exit keeps the session as it was), then the agent
     reports the change to the broker. A reconnection is a new ticket for the
     same session, presented at /connect again; the command does not run for it.
     The agent has no endpoint yet for a logoff that starts on the host.
  With --display xvnc, step 2 starts the session's own Xvnc first (as the session's
  account, see --display-account) and runs the session's command line, or
  --display-command, on it; --session-command then also gets USHER_DISPLAY, DISPLAY
  and XAUTHORITY. In step 3 the client (usher's gateway, or noVNC in a page of a
  --display-origin) opens the display instead of POSTing /connect: a WebSocket at
  ws(s)://VDA:8490/display offering the subprotocols "binary" and
  "usher.ticket.TICKET". Closing it disconnects the session; a relaunch returns to
  the same display; a second viewer takes the session over (close code 4001).
  examples/session-command.sh in the usher repository is a starting point.
`
