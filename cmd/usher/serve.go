package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/bytesize"
	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/gateway"
	"github.com/usher-vdi/usher/internal/lhc"
	"github.com/usher-vdi/usher/internal/server"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/tlsconf"
	"github.com/usher-vdi/usher/internal/vda"
)

// defaultSimWait bounds the wait for simulated VDAs before the banner.
const defaultSimWait = 15 * time.Second

func (m *Main) serve(ctx context.Context, args []string) error { return m.runSite(ctx, "serve", args) }

// broker runs one broker of a shared site: serve's listeners on a
// PostgreSQL site DB, under a name and in a zone.
func (m *Main) broker(ctx context.Context, args []string) error {
	return m.runSite(ctx, "broker", args)
}

// runSite is serve (all-in-one, SQLite by default, the demo site) and
// broker (one of a multi-broker site: --db required, no demo).
func (m *Main) runSite(ctx context.Context, role string, args []string) error {
	var cfg server.Config
	var logs logFlags
	isBroker := role == "broker"
	demoDesktop := false
	fs := m.flagSet(role, "[flags]")
	data := m.dataFlag(fs)
	db := m.dbFlag(fs)
	fs.StringVar(&cfg.Name, "name", "", "this broker's name in the site's broker registry (default: the host name); two running brokers cannot share one")
	fs.StringVar(&cfg.Zone, "zone", "", "the zone this broker is in (default: the primary zone): the user location of its launches; given, it takes only that zone's VDAs (and, in the primary zone, those of zones with primary_fallback)")
	fs.StringVar(&cfg.Listen, "listen", server.DefaultListen, "address of the HTTP listener (admin API, health)")
	fs.StringVar(&cfg.TLSCert, "tls-cert", "", "PEM certificate (chain) that the HTTP listeners (--listen, --nfuse-listen) serve TLS with, read again when it changes or on SIGHUP; with --tls-key. \"auto\": a self-signed certificate made in the data directory (for a demo or a test: clients then need it, curl --cacert)")
	fs.StringVar(&cfg.TLSKey, "tls-key", "", "PEM private key of --tls-cert")
	fs.BoolVar(&cfg.InsecureListen, "insecure-listen", false, "allow --listen and --nfuse-listen off loopback without TLS (anyone on the network reads and changes passwords, tickets and machine credentials)")
	fs.StringVar(&cfg.PeerCA, "peer-ca", "", "with TLS: PEM CA certificates that sign the site's other brokers' certificates, verified when this broker hands launches to its zone's leader (default: the system roots; this broker's own --tls-cert is trusted too)")
	fs.StringVar(&cfg.Advertise, "advertise", "", "host:port at which the site's other brokers reach this one's listener (a zone's brokers hand launches to its leader while the site DB is down; default: the listen address, with this host's name for a wildcard host)")
	startRetry := time.Duration(0)
	if isBroker {
		fs.DurationVar(&startRetry, "start-retry", 5*time.Minute, "how long to keep trying when the site DB does not answer at start and there is no local copy to broker from (0: fail at once)")
		fs.DurationVar(&cfg.OutageAfter, "outage-after", lhc.DefaultOutageAfter, "Local Host Cache: how long the site DB must fail to answer before this broker brokers from its local copy (Citrix: 90s)")
		fs.DurationVar(&cfg.RecoverAfter, "recover-after", lhc.DefaultRecoverAfter, "Local Host Cache: how long the site DB must answer again before this broker writes the outage's sessions back and returns to it")
		fs.BoolVar(&cfg.NoLocalHostCache, "no-local-host-cache", false, "keep no local copy of the site: brokering stops while the site DB is down")
	} else {
		fs.BoolVar(&cfg.Demo, "demo", false, "load the demo site (400 applications, 57 machines, 1,000 users) into an empty site DB; a site DB that holds a site is kept as it is")
		fs.BoolVar(&cfg.DemoReset, "demo-reset", false, "with --demo: replace whatever the site DB holds with the demo site, and reset its passwords")
		fs.StringVar(&cfg.DemoPassword, "demo-password", "", "with --demo: password of the demo users and of the admin account (default: random at the first start, printed; kept at later starts)")
		fs.BoolVar(&demoDesktop, "demo-desktop", true, "with --demo: when Xvnc is installed, serve the \""+demo.DesktopResource+"\" machines from a real session host on this machine "+
			"(an Xvnc per session, run as this account or, for root, as nobody; its desktop an xterm when installed), shown in the portal's page; false: simulate them too")
	}
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", server.DefaultShutdownTimeout, "how long in-flight requests may run after SIGINT or SIGTERM")
	fs.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", api.DefaultMaxBodyBytes, "largest request body accepted")
	sendBuffer := fs.String("send-buffer", fmt.Sprintf("%dKiB", server.DefaultSendBuffer>>10), "socket send buffer of each HTTP connection, so that a whole enumeration is written at once (0: the kernel's autotuning)")
	fs.IntVar(&cfg.MaxConns, "max-conns", 0, "HTTP connections held at once, the listeners together; at the bound the one idle longest is closed for a new one, and with none idle the new one is refused (0: the open files limit, raised to its hard limit, less a reserve for the site DB, VDAs and peers of 512 or a tenth of the limit, whichever is more; negative: no bound)")
	fs.IntVar(&cfg.MaxConnsPerClient, "max-conns-per-client", server.DefaultMaxConnsPerClient, "HTTP connections one client address may hold; more are refused with a 503 (0 or negative: no bound; raise it for a proxy or load balancer in front of the broker, whose clients share its address)")
	fs.StringVar(&cfg.HTTPServer, "http-server", server.HTTPServerHotpath, "what serves the HTTP listeners: hotpath (enumerations on lean event loops, the rest on Go's net/http) or net/http (everything on net/http, should the loops misbehave); limits, timeouts and TLS are the same")
	fs.StringVar(&cfg.NFuseListen, "nfuse-listen", "", "also serve the NFuse XML service (POST /scripts/wpnbr.dll) on its own listener, e.g. :8080 or :80")
	fs.StringVar(&cfg.BootListen, "boot-listen", "", "serve network boot on this address (off by default): iPXE scripts of the site's targets, and the kernel and initramfs of the image version each boots; unauthenticated, so loopback only unless --insecure-boot-listen")
	fs.BoolVar(&cfg.InsecureBootListen, "insecure-boot-listen", false, "allow a non-loopback --boot-listen (whoever reaches it reads every bound image's kernel and initramfs)")
	fs.StringVar(&cfg.ImageStore, "image-store", "", "with --boot-listen: the image store (the directory usher image import made) that targets boot from")
	fs.StringVar(&cfg.BootStream, "boot-stream", "", "with --boot-listen: the usher stream targets mount their root disk from, as they reach it: nbd://HOST:PORT (in QEMU's user networking the host is 10.0.2.2)")
	fs.StringVar(&cfg.BootAppend, "boot-append", "", "with --boot-listen: added to every target's kernel command line, e.g. \"console=ttyS0,115200n8\"")
	fs.StringVar(&cfg.BootAgent, "boot-agent", "", "with --boot-listen: the usher that ram and ram-overflow targets run in their initramfs as their write cache, a statically linked one (CGO_ENABLED=0); default: this usher when statically linked; none: refuse those targets")
	fs.IntVar(&cfg.SimVDAs, "sim-vdas", 0, "run this many simulated VDAs in-process, for the site's first machines (-1: all of them)")
	fs.DurationVar(&cfg.SimLogonDelay, "sim-logon-delay", vda.DefaultLogonDelay, "simulated VDAs: time from launch to the simulated user's logon")
	fs.DurationVar(&cfg.SimSessionLength, "sim-session-length", 0, "simulated VDAs: how long a simulated user stays (0: until logged off)")
	simWait := fs.Duration("sim-wait", defaultSimWait, "simulated VDAs: how long to wait for them to register before printing the URLs and credentials")
	fs.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", broker.DefaultHeartbeatInterval, "how often VDAs report load")
	fs.BoolVar(&cfg.AllowVDAAddressChange, "allow-vda-address-change", false, "let a VDA register an address on another host than its machine's configured address")
	fs.BoolVar(&cfg.InsecureVDAControl, "insecure-vda-control", false, "send control tokens to VDAs' http:// control URLs off loopback (agents run with --insecure-listen); off, such VDAs get no sessions")
	fs.StringVar(&cfg.DisplayMode, "display", server.DisplayGateway, "how browsers open the desktops of machines that register protocol vnc: gateway (through this broker at /api/v1/sessions/{id}/display, spliced to the machine's agent), direct (at the agent's own wss:// URL, for a LAN whose browsers reach the machines and trust their certificates) or off")
	var displayOrigins multiFlag
	fs.Var(&displayOrigins, "display-origin", "an origin (https://portal.example) besides this listener's own whose pages may open displays through the gateway, such as a proxy's public name; repeat for each")
	var agentOrigins multiFlag
	fs.Var(&agentOrigins, "display-agent-origin", "with --display direct: an origin wss://HOST[:PORT] (HOST may be *.domain) of agents the portal's pages may open displays at; repeat for each")
	fs.IntVar(&cfg.MaxDisplays, "max-displays", gateway.DefaultMaxSessions, "displays the gateway splices at once, all users together (0 or negative: no bound)")
	fs.IntVar(&cfg.MaxDisplaysPerUser, "max-displays-per-user", gateway.DefaultMaxSessionsPerUser, "displays one user may have open at once through the gateway (0 or negative: no bound)")
	fs.StringVar(&cfg.VDACA, "vda-ca", "", "PEM file of the CAs that sign VDAs' control listener certificates, for https control URLs registered without a pin (default: the system roots)")
	fs.DurationVar(&cfg.HeartbeatTimeout, "heartbeat-timeout", broker.DefaultHeartbeatTimeout, "silence after which a VDA is unregistered")
	fs.BoolVar(&cfg.MetricsAuth, "metrics-auth", false, "serve /metrics to admins only (HTTP basic or an admin bearer token); off, it shows anyone machine names and loads")
	fs.IntVar(&cfg.LockoutThreshold, "lockout-threshold", auth.DefaultLockoutThreshold, "failed logons within 10 minutes that lock a user or admin account out for 10 minutes (0 or negative: never lock out)")
	fs.IntVar(&cfg.SourceFree, "source-free", auth.DefaultSourceFree, "failed logons from one address before its attempts are delayed, doubling from 1s to 30s (0 or negative: no per-address throttling)")
	logs.register(fs)
	configFlag(fs)
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	// The flags' 0 means off; the Config's means the default.
	if cfg.LockoutThreshold <= 0 {
		cfg.LockoutThreshold = -1
	}
	if cfg.SourceFree <= 0 {
		cfg.SourceFree = -1
	}
	if cfg.MaxConnsPerClient <= 0 {
		cfg.MaxConnsPerClient = -1
	}
	if cfg.MaxDisplays <= 0 {
		cfg.MaxDisplays = -1
	}
	if cfg.MaxDisplaysPerUser <= 0 {
		cfg.MaxDisplaysPerUser = -1
	}
	cfg.DisplayOrigins, cfg.DisplayAgentOrigins = displayOrigins, agentOrigins
	if len(agentOrigins) > 0 && cfg.DisplayMode != server.DisplayDirect {
		return usageError{"--display-agent-origin is for --display direct"}
	}
	if d := cfg.DisplayMode; d != server.DisplayGateway && d != server.DisplayDirect && d != server.DisplayOff {
		return usageError{fmt.Sprintf("--display %q: want %s, %s or %s", d, server.DisplayGateway, server.DisplayDirect, server.DisplayOff)}
	}
	cfg.DataDir, cfg.DB = *data, *db
	if err := server.CheckDB(cfg.DB); err != nil {
		return usageError{err.Error()}
	}
	if isBroker && cfg.DB == "" {
		return usageError{"usher broker needs --db postgres://...: the brokers of a site share a PostgreSQL site DB (for one node on embedded SQLite, use usher serve)"}
	}
	var err error
	if cfg.SendBuffer, err = bytesize.Parse(*sendBuffer); err != nil || cfg.SendBuffer > server.MaxSendBuffer {
		return usageError{fmt.Sprintf("--send-buffer %q is not a size up to 64MiB", *sendBuffer)}
	}
	if cfg.SendBuffer == 0 {
		cfg.SendBuffer = -1 // the flag's 0 is the kernel's autotuning
	}
	if cfg.SimLogonDelay == 0 {
		cfg.SimLogonDelay = -1 // the flag's 0 is at once
	}
	if cfg.HTTPServer != server.HTTPServerHotpath && cfg.HTTPServer != server.HTTPServerNetHTTP {
		return usageError{fmt.Sprintf("--http-server %q: want %s or %s", cfg.HTTPServer, server.HTTPServerHotpath, server.HTTPServerNetHTTP)}
	}
	if cfg.DemoPassword != "" && !cfg.Demo {
		return usageError{"--demo-password needs --demo"}
	}
	if cfg.DemoReset && !cfg.Demo {
		return usageError{"--demo-reset needs --demo"}
	}
	// --demo-desktop is on by default: it matters with --demo alone.
	cfg.DemoDesktop = demoDesktop && cfg.Demo
	if cfg.BootListen != "" && (cfg.ImageStore == "" || cfg.BootStream == "") {
		return usageError{"--boot-listen needs --image-store DIR and --boot-stream nbd://HOST:PORT"}
	}
	if cfg.BootListen == "" && (cfg.ImageStore != "" || cfg.BootStream != "" || cfg.BootAppend != "" || cfg.BootAgent != "" || cfg.InsecureBootListen) {
		return usageError{"--image-store, --boot-stream, --boot-append, --boot-agent and --insecure-boot-listen need --boot-listen"}
	}
	if cfg.BootListen != "" && !cfg.InsecureBootListen && !tlsconf.LoopbackAddr(cfg.BootListen) {
		return usageError{fmt.Sprintf("--boot-listen %s is not a loopback address: anyone who reaches it boots as any target of the site "+
			"(firmware has no credentials) and reads its image's kernel and initramfs; pass --insecure-boot-listen on a network for the targets alone", cfg.BootListen)}
	}
	if cfg.TLSCert != server.TLSAuto && (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return usageError{"--tls-cert and --tls-key go together (or --tls-cert auto, alone)"}
	}
	if cfg.TLSCert == server.TLSAuto && cfg.TLSKey != "" {
		return usageError{"--tls-cert auto makes its own key: no --tls-key"}
	}
	if cfg.PeerCA != "" && cfg.TLSCert == "" {
		return usageError{"--peer-ca needs TLS: --tls-cert"}
	}
	for _, l := range []struct{ flag, addr string }{{"--listen", cfg.Listen}, {"--nfuse-listen", cfg.NFuseListen}} {
		if l.addr == "" {
			continue
		}
		if err := tlsconf.CheckListen(l.flag, l.addr, cfg.TLSCert != "", cfg.InsecureListen); err != nil {
			return usageError{err.Error()}
		}
	}
	if cfg.Logger, err = logs.logger(m.Stderr); err != nil {
		return err
	}
	s, err := openRetrying(ctx, cfg, startRetry)
	if err != nil {
		return err
	}
	if s.Certificate() != nil {
		stop := m.hangups(ctx, cfg.Logger, s.ReloadTLS)
		defer stop()
	}
	// The banner comes last, after the simulated VDAs have registered (or
	// given up waiting), so that the credentials do not scroll away under
	// their logs.
	start := time.Now()
	registered, total := s.WaitSimulated(ctx, *simWait)
	desktopUp := s.WaitDemoDesktop(ctx, max(*simWait-time.Since(start), time.Second))
	m.printBanner(s, cfg.Demo)
	m.printDemoDesktop(s.DemoDesktop(), desktopUp)
	switch {
	case total == 0:
	case registered == total:
		fmt.Fprintf(m.Stdout, "%d simulated VDAs registered in %s.\n", total, time.Since(start).Round(time.Millisecond))
	default:
		fmt.Fprintf(m.Stdout, "%d of %d simulated VDAs registered within %s; the rest keep trying (--log-level debug tells why).\n",
			registered, total, *simWait)
	}
	fmt.Fprintln(m.Stdout, "\nPress Ctrl-C to stop.")
	if m.Listening != nil {
		m.Listening("http", s.Addr())
		if a := s.BootAddr(); a != "" {
			m.Listening("boot", a)
		}
	}
	return s.Run(ctx)
}

// openRetrying opens the site, trying again with a growing delay for as
// long as retry allows while the site DB does not answer.
func openRetrying(ctx context.Context, cfg server.Config, retry time.Duration) (*server.Server, error) {
	deadline := time.Now().Add(retry)
	delay := time.Second
	for {
		s, err := server.Open(ctx, cfg)
		if err == nil || site.ErrorCode(err) != site.EUnavailable || time.Now().Add(delay).After(deadline) {
			return s, err
		}
		if cfg.Logger != nil {
			cfg.Logger.Warn("the site DB does not answer; trying again", "in", delay, "err", err)
		}
		stop := notReady(cfg, err)
		select {
		case <-ctx.Done():
			stop()
			return nil, err
		case <-time.After(delay):
		}
		stop()
		delay = min(2*delay, 30*time.Second)
	}
}

// notReady answers on addr, while a broker waits to try its site DB
// again, that it is alive (/healthz: 200) and not ready (/readyz and
// every other path: 503 unavailable, saying why), so that a load
// balancer or an orchestrator sees a broker starting rather than none.
// It returns what stops it; when addr cannot be bound, it serves nothing.
// With TLS it serves the listener's certificate (the self-signed one that
// the failed start made), or nothing when it does not load.
func notReady(cfg server.Config, why error) (stop func()) {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return func() {}
	}
	if cert, key := cfg.TLSCert, cfg.TLSKey; cert != "" {
		if cert == server.TLSAuto {
			cert, key = filepath.Join(cfg.DataDir, tlsconf.SelfSignedCert), filepath.Join(cfg.DataDir, tlsconf.SelfSignedKey)
		}
		r, err := tlsconf.NewReloader(cert, key, nil)
		if err != nil {
			ln.Close()
			return func() {}
		}
		ln = tls.NewListener(ln, r.ServerConfig())
	}
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"code": site.EUnavailable,
		"message": "this broker is starting: its site DB does not answer yet (" + site.ErrorMessage(why) + ")"}})
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.Write([]byte("ok\n"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write(body)
	})}
	done := make(chan struct{})
	go func() { srv.Serve(ln); close(done) }()
	return func() { srv.Close(); <-done }
}

// printDemoDesktop says which desktop of the demo opens in the page, or
// how to get one.
func (m *Main) printDemoDesktop(d server.DemoDesktop, registered bool) {
	switch {
	case len(d.Machines) > 0:
		fmt.Fprintf(m.Stdout, "Desktop in the browser: log on to the portal as %s and open %q: a real session on this machine "+
			"(an Xvnc per session, run as this account), served by %d in-process VDA agents (%s to %s).\n",
			d.User, d.Resource, len(d.Machines), d.Machines[0], d.Machines[len(d.Machines)-1])
		if !registered {
			fmt.Fprintln(m.Stdout, "Its agents have not all registered yet; they keep trying (--log-level debug tells why).")
		}
	case d.Missing != "":
		fmt.Fprintf(m.Stdout, "Desktop in the browser: none yet; %s.\n", d.Missing)
	}
}

func (m *Main) printBanner(s *server.Server, isDemo bool) {
	base := s.URL()
	_, secretPath := s.EnrolmentSecret()
	if z := s.Zone(); z != "" {
		fmt.Fprintf(m.Stdout, "usher is serving the site in %s as broker %q of zone %q\n\n", s.SiteDB(), s.Name(), z)
	} else {
		fmt.Fprintf(m.Stdout, "usher is serving the site in %s as broker %q (the site has no zones yet: usher apply -f FILE makes them)\n\n", s.SiteDB(), s.Name())
	}
	fmt.Fprintf(m.Stdout, "  Portal:       %s/  (users)\n", base)
	fmt.Fprintf(m.Stdout, "  Console:      %s/console  (admins)\n", base)
	fmt.Fprintf(m.Stdout, "  Admin API:    %s/api/v1/admin/  (HTTP basic or bearer token)\n", base)
	fmt.Fprintf(m.Stdout, "  OpenAPI:      %s/api/openapi.json\n", base)
	fmt.Fprintf(m.Stdout, "  User API:     %s/api/v1/login, /api/v1/resources\n", base)
	fmt.Fprintf(m.Stdout, "  NFuse XML:    %s/scripts/wpnbr.dll\n", base)
	if u := s.NFuseURL(); u != "" {
		fmt.Fprintf(m.Stdout, "                and %s/scripts/wpnbr.dll\n", u)
	}
	if a := s.BootAddr(); a != "" {
		fmt.Fprintf(m.Stdout, "  Network boot: http://%s/boot/script.ipxe  (iPXE chain script; targets: /api/v1/admin/targets)\n", a)
	}
	fmt.Fprintf(m.Stdout, "  Metrics:      %s/metrics\n", base)
	fmt.Fprintf(m.Stdout, "  Health:       %s/healthz  %s/readyz\n", base, base)
	fmt.Fprintf(m.Stdout, "  VDA enrolment secret: %s\n", secretPath)
	curl := "curl"
	if leaf := s.Certificate(); leaf != nil {
		fmt.Fprintf(m.Stdout, "  TLS:          certificate %s (%s, until %s)\n", s.TLSCertFile(), leaf.Subject.CommonName, leaf.NotAfter.UTC().Format(time.DateOnly))
		fmt.Fprintf(m.Stdout, "                SHA-256 fingerprint %s\n", tlsconf.Fingerprint(leaf.Raw))
		if leaf.IsCA && leaf.CheckSignatureFrom(leaf) == nil {
			curl = "curl --cacert " + shellQuote(s.TLSCertFile())
		}
	}
	if isDemo {
		password := s.DemoPassword()
		user := shellQuote(demo.Admin + ":" + password)
		if password != "" {
			fmt.Fprintf(m.Stdout, "\nDemo credentials (password for all of them: %s)\n", password)
		} else {
			// The site keeps only the passwords' hashes: a restart cannot
			// show the password printed at the first start.
			fmt.Fprintf(m.Stdout, "\nDemo credentials (password unchanged since the first start, which printed it; to set a new one for all of them,\n"+
				"restart with --demo-password P: usher serve --demo --demo-password 'NEW PASSWORD')\n")
			user = `"` + demo.Admin + `:$PASSWORD"`
		}
		fmt.Fprintf(m.Stdout, "  admin:        %s\n", demo.Admin)
		fmt.Fprintf(m.Stdout, "  users:        user0001 .. user1000 (domain DEMO)\n")
		fmt.Fprintf(m.Stdout, "\nTry: %s -u %s %s\n", curl, user, shellQuote(base+"/api/v1/admin/applications?limit=5"))
	}
	fmt.Fprintln(m.Stdout)
}
