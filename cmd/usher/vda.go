package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/vda"
)

// DefaultVDAListen is the control listener of a VDA agent.
const DefaultVDAListen = ":8490"

// envEnrolmentSecret holds the enrolment secret when no file names it.
const envEnrolmentSecret = "USHER_ENROLMENT_SECRET"

type vdaFlags struct {
	broker, secretFile, listen string
	heartbeat                  time.Duration
	logs                       logFlags

	// The agent.
	machine, address, protocol, controlURL, sessionCommand, stateFile string
	maxSessions                                                       int

	// The simulator.
	simulate                              int
	machines, prefix                      string
	logonDelay, sessionLen, sessionJitter time.Duration
	manualConnect                         bool
}

var (
	agentOnlyFlags = []string{"machine", "address", "protocol", "control-url", "session-command", "state-file", "max-sessions"}
	simOnlyFlags   = []string{"machines", "machine-prefix", "logon-delay", "session-length", "session-jitter", "manual-connect"}
)

func (m *Main) vda(ctx context.Context, args []string) error {
	var f vdaFlags
	fs := m.flagSet("vda", "--broker URL --machine NAME [--address HOST:PORT] [flags]\n"+
		"       usher vda --simulate N --broker URL (--machines A,B,... | --machine-prefix P) [flags]\n\n"+
		"The enrolment secret comes from --enrolment-secret-file or $"+envEnrolmentSecret+".")
	fs.StringVar(&f.broker, "broker", "", "base URL of the broker, e.g. http://broker:8080 (required)")
	fs.StringVar(&f.secretFile, "enrolment-secret-file", "", "file holding the site's enrolment secret (else $"+envEnrolmentSecret+")")
	fs.StringVar(&f.listen, "listen", "", "address of the control listener (default "+DefaultVDAListen+", or "+vda.DefaultSimListen+" with --simulate)")
	fs.DurationVar(&f.heartbeat, "heartbeat-interval", 0, "heartbeat this often instead of as the broker says")
	f.logs.register(fs)

	fs.StringVar(&f.machine, "machine", "", "this machine's name in the site (agent; required)")
	fs.StringVar(&f.address, "address", "", "where clients reach the display protocol, HOST:PORT (agent; default: the site's address of the machine)")
	fs.StringVar(&f.protocol, "protocol", "rdp", "display protocol: rdp or ica (agent)")
	fs.StringVar(&f.controlURL, "control-url", "", "URL where the broker reaches the control listener (agent; default http://HOST:PORT of --listen, or of --address's host)")
	fs.StringVar(&f.sessionCommand, "session-command", "", "command run, without a shell, when a session is prepared, logged off or disconnected; it gets USHER_EVENT, USHER_SESSION_ID, USHER_USER, USHER_RESOURCE and USHER_COMMAND_LINE (agent)")
	fs.StringVar(&f.stateFile, "state-file", "", "file that keeps the sessions across agent restarts (agent)")
	fs.IntVar(&f.maxSessions, "max-sessions", 0, "most sessions this host takes; 0 leaves it to the site's load rules (agent)")

	fs.IntVar(&f.simulate, "simulate", 0, "run N simulated VDAs instead of the agent")
	fs.StringVar(&f.machines, "machines", "", "comma-separated names of the simulated machines; the first N are simulated")
	fs.StringVar(&f.prefix, "machine-prefix", "", "simulate machines PREFIX-001 .. PREFIX-N")
	fs.DurationVar(&f.logonDelay, "logon-delay", vda.DefaultLogonDelay, "time from prepare to the simulated client's arrival")
	fs.DurationVar(&f.sessionLen, "session-length", 0, "simulated users log off after this long; 0: when the broker or user logs them off")
	fs.DurationVar(&f.sessionJitter, "session-jitter", 0, "spread of the session length, plus or minus")
	fs.BoolVar(&f.manualConnect, "manual-connect", false, "no simulated clients: sessions wait for a client to present its ticket at /connect")
	if err := parse(fs, args, 0); err != nil {
		return err
	}

	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if f.broker == "" {
		return usageError{"--broker URL is required"}
	}
	if f.heartbeat < 0 {
		return usageError{"--heartbeat-interval must not be negative"}
	}
	secret, err := m.enrolmentSecret(f.secretFile)
	if err != nil {
		return err
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
	if f.simulate < 1 {
		return usageError{"--simulate N needs N of at least 1"}
	}
	var names []string
	switch {
	case f.machines != "" && f.prefix != "":
		return usageError{"--machines and --machine-prefix exclude each other"}
	case f.machines != "":
		for n := range strings.SplitSeq(f.machines, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
		if len(names) < f.simulate {
			return usageError{fmt.Sprintf("--simulate %d but --machines names %d", f.simulate, len(names))}
		}
		names = names[:f.simulate]
	case f.prefix != "":
		names = vda.Names(f.prefix, f.simulate)
	default:
		return usageError{"--simulate needs the machines' names: --machines A,B,... or --machine-prefix P"}
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
	listen := orDefault(f.listen, vda.DefaultSimListen)
	sim, err := vda.NewSimulator(vda.SimConfig{
		Broker: f.broker, Secret: secret, Machines: names, Listen: listen,
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
	var hook vda.SessionHook
	if f.sessionCommand != "" {
		h, err := vda.ParseCommand(f.sessionCommand)
		if err != nil {
			return usageError{err.Error()}
		}
		hook = h
	}
	log, err := f.logs.logger(m.Stderr)
	if err != nil {
		return err
	}
	client, err := vda.NewClient(vda.ClientConfig{BrokerURL: f.broker, Logger: log})
	if err != nil {
		return usageError{err.Error()}
	}
	listen := orDefault(f.listen, DefaultVDAListen)
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listen, err)
	}
	defer ln.Close()
	controlURL := f.controlURL
	if controlURL == "" {
		if controlURL, err = defaultControlURL(ln.Addr().String(), f.address); err != nil {
			return err
		}
	}
	machine, err := vda.NewMachine(vda.MachineConfig{
		Name: f.machine, Client: client, Secret: secret, ControlURL: controlURL,
		Address: f.address, Protocol: f.protocol, MaxSessions: f.maxSessions,
		Load: &vda.ProcLoad{}, Hook: hook, HeartbeatInterval: f.heartbeat,
		StateFile: f.stateFile, Logger: log,
	})
	if err != nil {
		return usageError{err.Error()}
	}
	log.Info("VDA agent starting", "machine", f.machine, "broker", f.broker, "listen", ln.Addr().String(), "control_url", controlURL)
	if m.Listening != nil {
		m.Listening("vda", ln.Addr().String())
	}
	return vda.RunAgent(ctx, machine, ln)
}

// defaultControlURL is http://HOST:PORT of the listener, with the host of
// the display address, or this host's name, when the listener listens on
// every address.
func defaultControlURL(listenAddr, displayAddr string) (string, error) {
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
	return u.String(), nil
}

func orDefault(s, def string) string {
	if s != "" {
		return s
	}
	return def
}
