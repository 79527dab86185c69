package nfuse

import (
	"log/slog"
	"strings"
)

// Kind is an NFuse request type.
type Kind uint8

// The request types usher answers. KindUnknown is a Request* element usher
// does not know; it gets an unspecified error.
const (
	KindUnknown Kind = iota
	KindCapabilities
	KindServerFarmData
	KindServerData
	KindProtocolInfo
	KindValidateCredentials
	KindAppData
	KindAddress
	KindAltAddress
	KindTicket
	KindLaunchRef
	KindReconnectSessionData
	KindDiscSessionData
	KindDisconnectUserSessions
	KindLogoffUserSessions
	numKinds
)

var kindNames = [numKinds]string{
	KindUnknown:                "Unknown",
	KindCapabilities:           "Capabilities",
	KindServerFarmData:         "ServerFarmData",
	KindServerData:             "ServerData",
	KindProtocolInfo:           "ProtocolInfo",
	KindValidateCredentials:    "ValidateCredentials",
	KindAppData:                "AppData",
	KindAddress:                "Address",
	KindAltAddress:             "AltAddress",
	KindTicket:                 "Ticket",
	KindLaunchRef:              "LaunchRef",
	KindReconnectSessionData:   "ReconnectSessionData",
	KindDiscSessionData:        "DiscSessionData",
	KindDisconnectUserSessions: "DisconnectUserSessions",
	KindLogoffUserSessions:     "LogoffUserSessions",
}

// String returns the request element's name, "RequestAppData".
func (k Kind) String() string { return "Request" + k.name() }

// Response returns the name of the element that answers the request,
// "ResponseAppData".
func (k Kind) Response() string {
	if k >= numKinds {
		k = KindUnknown
	}
	return responseNames[k]
}

var responseNames = func() (names [numKinds]string) {
	for k := range names {
		names[k] = "Response" + kindNames[k]
	}
	return names
}()

func (k Kind) name() string {
	if k >= numKinds {
		k = KindUnknown
	}
	return kindNames[k]
}

// kindOf returns the kind of a request element name, in any case.
func kindOf(element string) Kind {
	rest, ok := cutPrefixFold(element, "Request")
	if !ok {
		return KindUnknown
	}
	for k := KindUnknown + 1; k < numKinds; k++ {
		if strings.EqualFold(rest, kindNames[k]) {
			return k
		}
	}
	return KindUnknown
}

// Request is one decoded NFuse request. Which fields are set depends on
// Kind; the comments name the request types that carry each. Names and
// keyword values are as sent, except that keyword lists (DesiredDetails,
// ServerTypes, ClientTypes, Flags, DesiredInfo) are lower-cased and every
// value but a password is trimmed of surrounding white space.
type Request struct {
	// Version is the client's protocol dialect (NFuseProtocol@version).
	Version string
	Kind    Kind
	// Element is the request element's name as sent.
	Element string

	// Credentials are the user's, nil when the request carries none.
	Credentials *Credentials
	// ClientName, ClientAddress and DeviceID describe the client
	// (RequestAppData, RequestAddress, session requests).
	ClientName    string
	ClientAddress Address
	DeviceID      string
	// ServerAddress is the server a request is about (RequestAddress,
	// RequestAltAddress, RequestProtocolInfo).
	ServerAddress Address
	// ServerTypes and ClientTypes filter the answer (RequestAppData,
	// RequestServerData, session requests); RequestAddress names the
	// client type it speaks.
	ServerTypes []string
	ClientTypes []string

	// Scope, DesiredDetails, DesiredIconData and AppName shape a
	// RequestAppData answer.
	Scope           Scope
	DesiredDetails  []string
	DesiredIconData *IconSpec
	AppName         string

	// Flags and Name are RequestAddress's: what to connect to.
	Flags []string
	Name  Name

	// TicketTag and LaunchRef name an earlier RequestAddress's launch
	// (RequestTicket, RequestLaunchRef).
	TicketTag string
	LaunchRef string

	// DesiredInfo asks RequestValidateCredentials for more than a yes
	// ("user-identity").
	DesiredInfo []string

	// SessionIDs limit RequestDisconnectUserSessions and
	// RequestLogoffUserSessions to some of the user's sessions; none means
	// all of them.
	SessionIDs []string
}

// Credentials identify a user: a name and password, or, in requests from
// a trusted server, only identities (ID elements).
type Credentials struct {
	UserName string
	Password Password
	// Domain is the Domain element; DomainType its type attribute ("NT").
	Domain     string
	DomainType string
	// IDs are identities vouched for by a trusted sender.
	IDs []ID
	// Anonymous is set by an AnonymousUser element.
	Anonymous bool
}

// Password is a password as sent: its encoding ("cleartext", "ctx1" or
// "" for none given) and value, still encoded. It never prints its value.
type Password struct {
	Encoding string
	Value    string
}

// String returns a redacted form, so that a logged Request shows no password.
func (p Password) String() string {
	if p.Value == "" {
		return "[empty]"
	}
	return "[redacted]"
}

// GoString is String, for %#v.
func (p Password) GoString() string { return p.String() }

// LogValue is String, for log/slog.
func (p Password) LogValue() slog.Value { return slog.StringValue(p.String()) }

// ID is an identity in trusted credentials: Type is "SAM" (DOMAIN\user),
// "UPN" (user@domain) or "SID".
type ID struct {
	Type, Value string
}

// Address is an address element's text and its addresstype attribute
// ("dot", "dot-port", "dns", "dns-port", ...).
type Address struct {
	Type, Value string
}

// Scope is RequestAppData's Scope: how deep to list (Traverse is
// "onelevel" or "subtree", lower-cased) from which folder (Folder, ""
// for the root), with Type as sent.
type Scope struct {
	Traverse string
	Type     string
	Folder   string
}

// IconSpec is DesiredIconData: the icon size in pixels, its colour depth
// and its format ("raw" or "png"), zero when not given.
type IconSpec struct {
	Size, BPP int
	Format    string
}

// Name is RequestAddress's Name: one of an application, a session, a
// server, a farm or nothing in particular.
type Name struct {
	AppName        string
	ServerName     string
	ServerFarmName string
	Unspecified    bool
	// Session is set when the Name holds a SessionName.
	Session *SessionName
}

// SessionName names one of the user's sessions: the application it runs
// (InName), the host it is on and its ID.
type SessionName struct {
	InName, HostID, SessionID string
}
