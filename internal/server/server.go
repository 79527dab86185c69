package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/auth/ldapauth/ldapprom"
	"github.com/usher-vdi/usher/internal/blob"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/broker/brokerprom"
	"github.com/usher-vdi/usher/internal/datadir"
	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/gateway"
	"github.com/usher-vdi/usher/internal/hotpath"
	"github.com/usher-vdi/usher/internal/lhc"
	"github.com/usher-vdi/usher/internal/lhc/peer"
	"github.com/usher-vdi/usher/internal/nfuse"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/tlsconf"
	"github.com/usher-vdi/usher/internal/vda"
	"github.com/usher-vdi/usher/internal/web"
)

// Defaults for Config.
const (
	// TLSAuto, as Config.TLSCert, makes a self-signed certificate.
	TLSAuto                = "auto"
	DefaultListen          = "127.0.0.1:8080"
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultSendBuffer is the socket send buffer of client connections.
	// An enumeration of 400 applications is 110 KB: with the kernel's
	// initial 16 KB the server writes it in pieces, waking up for each as
	// the client drains the last, which at thousands of connections costs
	// a quarter of the throughput and doubles p99 (bench enumerate at
	// 2,000 connections).
	DefaultSendBuffer = 256 << 10
	// MaxSendBuffer bounds Config.SendBuffer.
	MaxSendBuffer = 64 << 20
)

// How browsers reach sessions' displays, as Config.DisplayMode.
const (
	DisplayGateway = "gateway"
	DisplayDirect  = "direct"
	DisplayOff     = "off"
)

// What serves the HTTP listeners, as Config.HTTPServer.
const (
	// HTTPServerHotpath serves the enumerations on hotpath's lean loops
	// and the rest on net/http (the default).
	HTTPServerHotpath = "hotpath"
	// HTTPServerNetHTTP serves every request with net/http alone, for the
	// day the loops misbehave.
	HTTPServerNetHTTP = "net/http"
)

// HTTP server limits of the listeners.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = 60 * time.Second
	idleTimeout       = 120 * time.Second
	maxHeaderBytes    = 64 << 10
	// nfuseShutdown bounds the NFuse listener's graceful shutdown.
	nfuseShutdown = 5 * time.Second
)

// Config describes a site to run. The zero value of every field but
// DataDir means its default, so that a Config built by hand never gets a
// zero where a command's flag would have given a default.
type Config struct {
	// DataDir holds the site DB, the token key and the enrolment secret;
	// required. The server locks it.
	DataDir string
	// DB, when set, is the site DB: a PostgreSQL URL (postgres://...).
	// Empty means the embedded SQLite file of DataDir.
	DB string
	// Name is this broker's name in the site's broker registry (default:
	// the host name); two running brokers cannot share one.
	Name string
	// Zone is the zone this broker serves (default: the primary zone); it
	// must be one of the site's. Given, the broker takes only its zone's
	// VDAs (and, in the primary zone, those of zones with
	// primary_fallback); not given, every zone's, as the one broker of a
	// site does.
	Zone string
	// Listen is the address of the main HTTP listener: REST, admin and VDA
	// APIs, NFuse, metrics, health and the index page (default
	// DefaultListen).
	Listen string
	// Advertise is the address (host:port) at which the other brokers of
	// the site reach this one's listener: while the site DB is down, a
	// zone's brokers hand their launches to its leader there. Empty: the
	// listener's address, with this host's name for a wildcard host.
	Advertise string
	// NFuseListen, when set, also serves the NFuse XML service alone on
	// this address.
	NFuseListen string

	// TLSCert and TLSKey are the PEM files of the certificate (chain)
	// and key that the main and NFuse listeners serve TLS with (TLS 1.2
	// and up, HTTP/1.1, Strict-Transport-Security on every answer),
	// loaded again when they change (seen within a second) or at
	// ReloadTLS, without dropping a connection. TLSCert TLSAuto, without
	// TLSKey, makes a self-signed certificate in DataDir
	// (tlsconf.SelfSigned) for a demo or a test. Neither: the listeners
	// speak clear HTTP, which a listener off loopback refuses unless
	// InsecureListen.
	TLSCert, TLSKey string
	// InsecureListen lets the main and NFuse listeners speak clear HTTP
	// on an address off loopback; Open then logs a warning.
	InsecureListen bool
	// PeerCA is a PEM bundle of the CAs that sign the certificates of
	// the site's brokers: what this broker verifies a zone leader with,
	// and its simulated VDAs this broker (default: the system roots).
	// Either way this broker's own certificate file is trusted too, so
	// that a site whose brokers share one certificate or one CA (its
	// root in the chain file) needs none.
	PeerCA string

	// BootListen, when set, serves network boot on this address (see
	// boot/boothttp): the targets' iPXE scripts, and the kernel and
	// initramfs of the image version each boots, from ImageStore (the
	// directory usher image import made). Targets mount their root disk
	// from the stream at BootStream (nbd://HOST:PORT, as the targets
	// reach it); BootAppend is added to every kernel command line. The
	// listener is unauthenticated (firmware has no credentials): it must
	// be a loopback address unless InsecureBootListen.
	BootListen         string
	ImageStore         string
	BootStream         string
	BootAppend         string
	InsecureBootListen bool
	// BootAgent is the usher that ram and ram-overflow targets run in
	// their initramfs as their device-side write cache (boot/initramfs):
	// the path of a statically linked usher; "" or "auto" for this
	// executable when it is statically linked (else those targets are
	// refused, saying why); "none" to refuse them.
	BootAgent string

	// Demo loads the demo site into an empty site DB, with DemoPassword
	// (random when empty) on its users and on its admin account. A site DB
	// that holds a site already is kept as it is, passwords included,
	// unless DemoPassword is set (then the demo accounts get it) or
	// DemoReset is (then the demo site replaces the site).
	Demo         bool
	DemoReset    bool
	DemoPassword string
	// DemoDesktop, with Demo, runs a real session host in-process for the
	// machines of the demo's desktop group (demo.DesktopGroup, whose
	// desktop is demo.DesktopResource) when Xvnc is installed: one VDA
	// agent per machine (internal/vda, on a loopback control listener,
	// registering through the VDA API) whose sessions each get an Xvnc
	// (internal/display/xvnc) run as DemoDesktopAccount, opened in
	// the portal through the gateway. The simulated VDAs leave those
	// machines to it. Without Xvnc it runs nothing and DemoDesktop says
	// how to get it. usher serve's --demo-desktop, on by default, sets
	// it. DemoDesktopCommand is the sessions' desktop, a /bin/sh command
	// line (default demo.DesktopCommand). DemoDesktopAccount is the Unix
	// account the sessions run as: by default this process's, or
	// "nobody" when that is root, since every demo user's desktop would
	// otherwise be a root shell.
	DemoDesktop        bool
	DemoDesktopCommand string
	DemoDesktopAccount string

	// ShutdownTimeout is how long in-flight requests may run at Close
	// (default DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
	// MaxBodyBytes bounds request bodies (default api.DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// SendBuffer is each HTTP connection's socket send buffer in bytes, at
	// most MaxSendBuffer (default DefaultSendBuffer; negative leaves the
	// kernel's autotuning).
	SendBuffer int64
	// MaxConns bounds the HTTP connections of the listeners together;
	// at the bound the one idle longest is closed for a new one (default
	// hotpath.DefaultMaxConns(): the open files limit less a reserve;
	// negative: no bound). MaxConnsPerClient bounds one client address's
	// (default hotpath.DefaultMaxConnsPerClient; negative: no bound).
	MaxConns, MaxConnsPerClient int
	// HTTPServer is what serves the HTTP listeners (the main one and
	// NFuse's): HTTPServerHotpath (default) or HTTPServerNetHTTP. Either
	// way the listeners have the same handler, connection limits,
	// timeouts, send buffer, TLS and HSTS.
	HTTPServer string

	// HeartbeatInterval and HeartbeatTimeout are the broker's (defaults
	// broker.DefaultHeartbeatInterval and DefaultHeartbeatTimeout).
	HeartbeatInterval, HeartbeatTimeout time.Duration
	// RefreshInterval is how often the broker checks the site's
	// configuration version besides being told of changes (default
	// broker.DefaultRefreshInterval).
	RefreshInterval time.Duration
	// AllowVDAAddressChange lets a VDA register a display-protocol address
	// on another host than its machine's configured address; off, such a
	// registration is refused.
	AllowVDAAddressChange bool
	// InsecureVDAControl lets the broker send control tokens to VDAs'
	// http:// control URLs off loopback (agents run with
	// --insecure-listen); off, they are refused. VDACA is a PEM bundle
	// of the CAs that sign VDAs' control listener certificates, for https
	// control URLs registered without a pin (default: the system roots);
	// a registered pin is verified alone. See vdaControl.
	InsecureVDAControl bool
	VDACA              string

	// DisplayMode is how a browser reaches the desktop of a session on a
	// machine that registered vdaproto.ProtocolVNC (internal/gateway):
	// DisplayGateway (the default) through this broker's gateway at
	// /api/v1/sessions/{id}/display, spliced to the machine's agent;
	// DisplayDirect at the agent's own wss:// URL, for a LAN whose
	// browsers reach the machines and trust their certificates;
	// DisplayOff not at all (launches answer no display_url). The gateway
	// dials agents as the VDA control client does (VDACA,
	// InsecureVDAControl). DisplayOrigins are origins besides the
	// portal's own whose pages may open displays (a proxy's public name);
	// MaxDisplays and MaxDisplaysPerUser bound the displays open at once
	// (defaults gateway.DefaultMaxSessions and DefaultMaxSessionsPerUser;
	// negative: no bound).
	DisplayMode                     string
	DisplayOrigins                  []string
	MaxDisplays, MaxDisplaysPerUser int
	// DisplayAgentOrigins are the agents' origins the portal's pages may
	// open WebSockets to in DisplayDirect mode (its Content Security
	// Policy's connect-src): wss://HOST[:PORT], HOST possibly *.domain.
	DisplayAgentOrigins []string

	// SimVDAs runs that many simulated VDAs in-process, for the site's
	// first machines; -1 runs one for every machine. The machines of the
	// demo's desktop host (DemoDesktop) are left out.
	SimVDAs int
	// SimLogonDelay is the time from launch to a simulated user's logon
	// (default vda.DefaultLogonDelay; negative: at once).
	SimLogonDelay time.Duration
	// SimSessionLength is how long a simulated user stays (0: until
	// logged off).
	SimSessionLength time.Duration

	// LockoutThreshold failed password checks within the lock-out window
	// lock a user or admin account out (default
	// auth.DefaultLockoutThreshold; negative: never). SourceFree failed
	// logons from one client address cost nothing; after them each
	// attempt from the address waits a delay that doubles with each
	// failure (default auth.DefaultSourceFree; negative: no per-source
	// throttling).
	LockoutThreshold, SourceFree int
	// MetricsAuth serves /metrics to admins only (HTTP basic or an admin
	// bearer token, both of which Prometheus can send). Off, anyone who
	// reaches the listener reads machine names, loads and counts.
	MetricsAuth bool
	// PasswordParams are the argon2id costs of passwords the site sets
	// (default auth.DefaultParams); tests make them cheap.
	PasswordParams auth.Params
	// Now is the clock of lock-out and throttling (default time.Now).
	Now func() time.Time

	// OutageAfter and RecoverAfter are how long a PostgreSQL site DB must
	// fail to answer before the broker brokers from its local copy, and
	// answer again before it returns to it (defaults
	// lhc.DefaultOutageAfter and DefaultRecoverAfter). LHCProbeInterval
	// and LHCCopyEvery tune the Local Host Cache's probes and copies
	// (lhc.Options). NoLocalHostCache turns it off: the broker then stops
	// brokering while the site DB is down.
	OutageAfter, RecoverAfter      time.Duration
	LHCProbeInterval, LHCCopyEvery time.Duration
	NoLocalHostCache               bool

	// Logger receives the site's logs (default: discarded).
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.DataDir == "" {
		return c, errors.New("server: Config.DataDir is required")
	}
	if c.SendBuffer > MaxSendBuffer {
		return c, fmt.Errorf("server: send buffer %d is over %d bytes", c.SendBuffer, MaxSendBuffer)
	}
	switch c.HTTPServer {
	case "", HTTPServerHotpath, HTTPServerNetHTTP:
	default:
		return c, fmt.Errorf("server: HTTP server %q: want %q or %q", c.HTTPServer, HTTPServerHotpath, HTTPServerNetHTTP)
	}
	switch c.DisplayMode {
	case "", DisplayGateway, DisplayDirect, DisplayOff:
	default:
		return c, fmt.Errorf("server: display mode %q: want %q, %q or %q", c.DisplayMode, DisplayGateway, DisplayDirect, DisplayOff)
	}
	c.DisplayMode = cmp.Or(c.DisplayMode, DisplayGateway)
	if (c.DemoPassword != "" || c.DemoReset || c.DemoDesktop || c.DemoDesktopCommand != "") && !c.Demo {
		return c, errors.New("server: a demo password, reset or desktop needs the demo site")
	}
	if c.DemoDesktopCommand != "" && !c.DemoDesktop {
		return c, errors.New("server: a demo desktop command needs the demo desktop")
	}
	if err := c.checkBoot(); err != nil {
		return c, err
	}
	c.Listen = cmp.Or(c.Listen, DefaultListen)
	if err := c.checkTLS(); err != nil {
		return c, err
	}
	if c.Advertise != "" {
		if host, port, err := net.SplitHostPort(c.Advertise); err != nil || host == "" || port == "" {
			return c, fmt.Errorf("server: advertised address %q: want host:port", c.Advertise)
		} else if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			return c, fmt.Errorf("server: advertised address %q: other brokers cannot reach a wildcard address", c.Advertise)
		}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.HTTPServer = cmp.Or(c.HTTPServer, HTTPServerHotpath)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, DefaultShutdownTimeout)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, api.DefaultMaxBodyBytes)
	c.SendBuffer = cmp.Or(c.SendBuffer, DefaultSendBuffer)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, broker.DefaultHeartbeatInterval)
	c.HeartbeatTimeout = cmp.Or(c.HeartbeatTimeout, broker.DefaultHeartbeatTimeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Server is a running site. Open starts it; Close stops it.
type Server struct {
	cfg Config
	log *slog.Logger

	addr, nfuseAddr, bootAddr string
	// name and zone are this broker's in the site's broker registry.
	name, zone   string
	siteDB       string
	dataDir      string
	secret       string
	secretPath   string
	demoPassword string
	store        site.Store
	// lhc is the Local Host Cache in front of a PostgreSQL site DB (the
	// store), nil on an embedded site DB.
	lhc    *lhc.Store
	broker *broker.Broker
	// leader finds the zone's leader in outage mode; nil without lhc.
	leader *peer.Leader
	// peers calls the site's other brokers; nil without lhc.
	peers *peer.Client
	// sim runs the in-process simulated VDAs, if any.
	sim *vda.Simulator
	// conns bounds the listeners' connections.
	conns *hotpath.Limiter

	// tls serves the listeners' certificate, nil without TLS; tlsCert is
	// its file, trust what this process's clients of the site's brokers
	// verify them with.
	tls     *tlsconf.Reloader
	tlsCert string
	trust   *trust

	srv      *hotpath.Server
	served   chan struct{} // closed when srv.Serve returns, with serveErr
	serveErr error
	cleanup  []func() // run in reverse order by Close
	close    sync.Once
	closeErr error

	// stopStreams ends the API's long-lived answers (the dashboard's
	// event streams) at shutdown; nil until the API is made.
	stopStreams func()
	// gateway serves sessions' displays; nil with DisplayOff.
	gateway *gateway.Gateway
	// desktop is the demo's desktop host; nil without
	// Config.DemoDesktop.
	desktop *demoDesktop
}

// Open binds the listeners, opens the data directory and its site DB
// (loading the demo site when asked), starts the broker, serves HTTP and
// starts the simulated VDAs, and returns once the site serves. Binding
// comes first, so that a taken port fails before anything is changed. On
// error, whatever it started is stopped.
func Open(ctx context.Context, cfg Config) (_ *Server, err error) {
	if cfg, err = cfg.withDefaults(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	s := &Server{cfg: cfg, log: log, served: make(chan struct{})}
	defer func() {
		if err != nil {
			s.shutdown(0)
		}
	}()

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	s.cleanup = append(s.cleanup, func() { ln.Close() })
	var nln net.Listener
	if cfg.NFuseListen != "" {
		if nln, err = net.Listen("tcp", cfg.NFuseListen); err != nil {
			return nil, fmt.Errorf("listen on %s (NFuse): %w", cfg.NFuseListen, err)
		}
		s.cleanup = append(s.cleanup, func() { nln.Close() })
	}
	var bln net.Listener
	if cfg.BootListen != "" {
		if bln, err = net.Listen("tcp", cfg.BootListen); err != nil {
			return nil, fmt.Errorf("listen on %s (boot): %w", cfg.BootListen, err)
		}
		s.cleanup = append(s.cleanup, func() { bln.Close() })
	}

	dir, err := datadir.Open(cfg.DataDir, true)
	if err != nil {
		return nil, err
	}
	s.cleanup = append(s.cleanup, func() { dir.Close() })
	s.dataDir = dir.Path()
	// The answers sent with sendfile are unnamed files of the data
	// directory, where a disk filesystem's large pages cost the kernel
	// less per answer than memory files (see blob.SetFileDir).
	blob.SetFileDir(s.dataDir)
	if err := s.openTLS(); err != nil {
		return nil, err
	}
	if s.tls != nil {
		ln = s.tlsListener(ln)
		if nln != nil {
			nln = s.tlsListener(nln)
		}
	}
	var store site.Store
	var where string
	if IsPostgres(cfg.DB) && !cfg.NoLocalHostCache {
		s.lhc, where, err = openLHC(ctx, cfg, dir, log)
		store = s.lhc
	} else {
		store, where, err = OpenStore(ctx, StoreConfig{DB: cfg.DB, Dir: dir, Logger: log})
	}
	if err != nil {
		return nil, err
	}
	s.cleanup = append(s.cleanup, func() { store.Close() })
	s.store = store
	s.siteDB = where
	log.Info("site DB open", "db", where)

	params := cmp.Or(cfg.PasswordParams, auth.DefaultParams)
	if cfg.Demo {
		if err := s.loadDemo(ctx, params); err != nil {
			return nil, err
		}
	}
	if err := api.CheckAdmins(ctx, store, log); err != nil {
		return nil, err
	}

	// The token key and the enrolment secret are the site's, in the site
	// DB, so that every broker signs and checks alike. A site DB without
	// them takes this data directory's (from before they moved there),
	// or new ones.
	key, err := site.EnsureSecret(ctx, store, site.SecretTokenKey, dir.TokenKey)
	if err != nil {
		return nil, err
	}
	signer, err := auth.NewSigner(key)
	if err != nil {
		return nil, err
	}
	secret, err := site.EnsureSecret(ctx, store, site.SecretEnrolment, func() ([]byte, error) {
		s, _, err := dir.EnrolmentSecret()
		return []byte(s), err
	})
	if err != nil {
		return nil, err
	}
	// The data directory keeps a copy for VDAs on this host to enrol with.
	if s.secretPath, err = dir.SetEnrolmentSecret(string(secret)); err != nil {
		return nil, err
	}
	s.secret = string(secret)

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := brokerprom.New()
	if err := metrics.Register(registry); err != nil {
		return nil, err
	}
	s.conns = hotpath.NewLimiter(hotpath.LimitConfig{MaxConns: cfg.MaxConns, MaxConnsPerClient: cfg.MaxConnsPerClient, Logger: log})
	if err := registerConnMetrics(registry, s.conns); err != nil {
		return nil, err
	}
	directoryMetrics := ldapprom.New()
	if err := directoryMetrics.Register(registry); err != nil {
		return nil, err
	}
	// One guard and one cache of verified passwords for users and admins:
	// a source is throttled for both, and every argon2id computation waits
	// in one queue.
	guard := auth.NewGuard(auth.GuardConfig{Threshold: cfg.LockoutThreshold, SourceFree: cfg.SourceFree, Now: cfg.Now})
	verified := auth.NewVerifiedCache(15*time.Minute, 100000)
	zone, err := brokerZone(ctx, store, cfg.Zone)
	if err != nil {
		return nil, err
	}
	vdaCAs, err := vdaCAs(cfg)
	if err != nil {
		return nil, err
	}
	control := vdaControl(cfg, vdaCAs)
	brk, err := broker.New(ctx, broker.Config{Store: store, Control: control, Logger: log, Observer: metrics,
		HeartbeatInterval: cfg.HeartbeatInterval, HeartbeatTimeout: cfg.HeartbeatTimeout, RefreshInterval: cfg.RefreshInterval, StatusSyncInterval: statusSync(cfg), Now: cfg.Now,
		Zone: zone, OwnZoneVDAs: cfg.Zone != "", SiteLockout: IsPostgres(cfg.DB),
		Guard: guard, Verified: verified, PasswordParams: params, AllowAddressChange: cfg.AllowVDAAddressChange,
		OpenDirectory: openDirectory(log, directoryMetrics)})
	if err != nil {
		return nil, fmt.Errorf("start broker: %w", err)
	}
	s.cleanup = append(s.cleanup, brk.CloseDirectory)
	metrics.Attach(brk)
	metrics.AttachStore(store)
	if err := registerPasswordMetrics(registry, verified); err != nil {
		return nil, err
	}
	s.broker = brk
	if IsPostgres(cfg.DB) {
		siteDB := func() site.Store { return store }
		if s.lhc != nil {
			siteDB = s.lhc.Primary
		}
		if err := registerSiteDBMetrics(registry, siteDB); err != nil {
			return nil, err
		}
	}
	var outage api.Outage
	if s.lhc != nil {
		if err := registerLHCMetrics(registry, s.lhc); err != nil {
			return nil, err
		}
		s.lhc.Attach(brk)
		outage = s.lhc
	}
	s.name, s.zone = cfg.Name, zone
	if s.name == "" {
		if s.name, err = os.Hostname(); err != nil || s.name == "" {
			s.name = "usher"
		}
	}
	// The broker and the simulator outlive ctx (which only bounds
	// opening): Close stops them.
	var peerHandler *peer.Handler // with a local host cache only
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	brokerDone := make(chan struct{})
	go func() { defer close(brokerDone); brk.Run(runCtx) }()
	s.cleanup = append(s.cleanup, func() { stopRun(); <-brokerDone })
	if s.lhc != nil {
		lhcDone := make(chan struct{})
		go func() { defer close(lhcDone); s.lhc.Run(runCtx) }()
		s.cleanup = append(s.cleanup, func() { stopRun(); <-lhcDone })
		// The brokers of a zone prove to each other that they hold the
		// site's key (internal/lhc/peer), with a key of their own derived
		// from the token key.
		peerKey := signer.Derive("peer")
		client, err := peer.NewClient(s.peerClientConfig(peerKey))
		if err != nil {
			return nil, err
		}
		if peerHandler, err = peer.NewHandler(peer.HandlerConfig{Name: s.name, Key: peerKey, Broker: brk, LHC: s.lhc,
			Logger: log}); err != nil {
			return nil, err
		}
		s.peers = client
		leader := peer.NewLeader(peer.LeaderConfig{Name: s.name, Zone: zone, LHC: s.lhc, Client: client, Stale: brokerStale,
			Logger: log})
		s.leader = leader
		brk.SetDelegate(leader)
		leaderDone := make(chan struct{})
		go func() { defer close(leaderDone); leader.Run(runCtx) }()
		s.cleanup = append(s.cleanup, func() { stopRun(); <-leaderDone })
	}

	// The dashboard's event streams end when the server begins to shut
	// down, as they would hold its shutdown otherwise.
	stopping := make(chan struct{})
	s.stopStreams = sync.OnceFunc(func() { close(stopping) })
	apiConfig := api.Config{Store: store, Logger: log, Signer: signer, PasswordParams: params, Guard: guard, Verified: verified,
		MaxBodyBytes: cfg.MaxBodyBytes, Broker: brk, EnrolmentSecret: s.secret, Outage: outage,
		Brokers: s, Metrics: registry, Stopping: stopping}
	if cfg.DisplayMode != DisplayOff {
		if s.gateway, err = gateway.New(gateway.Config{Authenticate: api.UserAuthenticator(signer, brk), Resolver: gateway.FromBroker(brk),
			AllowedOrigins: cfg.DisplayOrigins, Direct: cfg.DisplayMode == DisplayDirect, CAs: vdaCAs, AllowPlain: cfg.InsecureVDAControl,
			MaxSessions: cfg.MaxDisplays, MaxSessionsPerUser: cfg.MaxDisplaysPerUser, Registerer: registry, Logger: log}); err != nil {
			return nil, err
		}
		apiConfig.DisplayURL = s.gateway.DisplayURL
		if cfg.DisplayMode == DisplayGateway {
			apiConfig.Display = s.gateway
		}
	}
	apiServer, err := api.New(apiConfig)
	if err != nil {
		return nil, err
	}
	trendsDone := make(chan struct{})
	go func() { defer close(trendsDone); apiServer.RunTrends(runCtx) }()
	s.cleanup = append(s.cleanup, func() { stopRun(); <-trendsDone })
	nf, err := nfuse.New(nfuse.Config{Broker: brk, Logger: log.With("component", "nfuse"),
		Observe: func(k nfuse.Kind, errorID string, d time.Duration) { metrics.ObserveXML(k.String(), errorID, d) }})
	if err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.Handle("/api/", apiServer)
	if peerHandler != nil {
		mux.Handle(peer.Prefix, peerHandler)
	}
	var metricsHandler http.Handler = promhttp.HandlerFor(registry, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)})
	if cfg.MetricsAuth {
		metricsHandler = apiServer.RequireAdmin(metricsHandler)
	}
	mux.Handle("GET /metrics", metricsHandler)
	mux.HandleFunc("GET /healthz", api.Healthz)
	mux.Handle("GET /readyz", api.Readyz(store, log))
	// Through the gateway, displays are same-origin; in direct mode the
	// pages open the agents' own wss:// URLs.
	var portalCfg web.PortalConfig
	if cfg.DisplayMode == DisplayDirect {
		portalCfg.DisplayOrigins = cfg.DisplayAgentOrigins
	}
	portal, err := web.Portal(portalCfg)
	if err != nil {
		return nil, err
	}
	mux.Handle("GET /{$}", portal)
	mux.Handle("GET /portal/", portal)
	mux.Handle("GET /console", portal)
	mux.Handle("GET /site", web.Index(brk.Snapshot))
	// The NFuse path is matched in any case, as Citrix clients spell it
	// variously.
	var handler http.Handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if nfuse.IsPath(req.URL.Path) {
			nf.ServeHTTP(w, req)
			return
		}
		mux.ServeHTTP(w, req)
	})
	var nfHandler http.Handler = nf
	if s.tls != nil {
		handler, nfHandler = tlsconf.WithHSTS(handler), tlsconf.WithHSTS(nf)
	}

	if nln != nil {
		nsrv, err := s.httpServer(ctx, nfHandler)
		if err != nil {
			return nil, err
		}
		s.nfuseAddr = nln.Addr().String()
		log.Info("NFuse listening", "addr", s.nfuseAddr)
		nfDone := make(chan struct{})
		go func() { defer close(nfDone); nsrv.Serve(nln) }()
		s.cleanup = append(s.cleanup, func() {
			sctx, cancel := context.WithTimeout(context.Background(), nfuseShutdown)
			defer cancel()
			if nsrv.Shutdown(sctx) != nil {
				nsrv.Close()
			}
			<-nfDone
		})
	}

	if bln != nil {
		if err := s.startBoot(ctx, bln, store, brk, registry); err != nil {
			return nil, err
		}
	}

	s.addr = ln.Addr().String()
	advertised, err := advertise(cfg.Advertise, s.addr)
	if err != nil {
		return nil, err
	}
	now := cfg.Now()
	stopRegistry, err := s.registerBroker(ctx, site.BrokerRecord{Name: s.name, Zone: s.zone, Address: advertised,
		Instance: brokerInstance(s.dataDir), StartedAt: now, LastSeen: now})
	if err != nil {
		return nil, fmt.Errorf("broker %q: %w", s.name, err)
	}
	s.cleanup = append(s.cleanup, stopRegistry)
	// From here on, nothing fails before Serve starts: shutdown waits for
	// it to return.
	if s.srv, err = s.httpServer(ctx, handler); err != nil {
		return nil, err
	}
	log.Info("listening", "addr", s.addr, "advertised", advertised, "broker", s.name, "zone", s.zone, "http_server", cfg.HTTPServer)
	go func() { s.serveErr = s.srv.Serve(ln); close(s.served) }()

	if cfg.DemoDesktop {
		if err := s.startDemoDesktop(runCtx); err != nil {
			return nil, err
		}
		s.cleanup = append(s.cleanup, s.desktop.close)
	}
	if cfg.SimVDAs != 0 {
		stop, err := s.startSimulator(runCtx)
		if err != nil {
			return nil, err
		}
		s.cleanup = append(s.cleanup, stop)
	}
	return s, nil
}

// loadDemo loads the demo site as Config.Demo says.
func (s *Server) loadDemo(ctx context.Context, params auth.Params) error {
	empty, err := demo.Empty(ctx, s.store)
	if err != nil {
		return fmt.Errorf("read site DB: %w", err)
	}
	if !empty && !s.cfg.DemoReset {
		if s.cfg.DemoPassword != "" {
			changed, err := demo.SetPassword(ctx, s.store, s.cfg.DemoPassword, params)
			if err != nil {
				return fmt.Errorf("set demo password: %w", err)
			}
			s.demoPassword = s.cfg.DemoPassword
			if changed {
				s.log.Info("site kept as it is; demo accounts' password set")
			} else {
				s.log.Info("site kept as it is, passwords included (--demo-reset reloads the demo site)")
			}
			return nil
		}
		s.log.Info("site kept as it is, passwords included (--demo-reset reloads the demo site)")
		return nil
	}
	s.demoPassword = cmp.Or(s.cfg.DemoPassword, auth.RandomSecret(12))
	start := time.Now()
	plan, err := demo.Load(ctx, s.store, s.demoPassword, params)
	if err != nil {
		return fmt.Errorf("load demo site: %w", err)
	}
	c, u, d := plan.Counts()
	s.log.Info("demo site loaded", "created", c, "updated", u, "deleted", d, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// httpServer serves h with the site's limits: enumerations (the NFuse
// path and GET /api/v1/resources) on hotpath's lean loop, the rest on
// net/http; everything on net/http with Config.HTTPServer
// HTTPServerNetHTTP. Requests' contexts are not cancelled with ctx:
// Close drains them.
func (s *Server) httpServer(ctx context.Context, h http.Handler) (*hotpath.Server, error) {
	// A TLS listener is no TCP listener: hotpath serves it a goroutine
	// per connection.
	return hotpath.New(hotpath.Config{Handler: h, Hot: hot, SendBuffer: int(max(s.cfg.SendBuffer, 0)), Logger: s.log,
		LoopContext: broker.NoWait, Goroutines: s.tls != nil, NetHTTP: s.cfg.HTTPServer == HTTPServerNetHTTP,
		Limiter:  s.conns,
		Fallback: s.fallbackServer(ctx, h)})
}

// hot names the requests served on the lean loop: the enumerations.
func hot(method, path string) bool {
	switch method {
	case http.MethodPost:
		return nfuse.IsPath(path)
	case http.MethodGet:
		return path == "/api/v1/resources"
	}
	return false
}

// fallbackServer is an http.Server with the site's limits.
func (s *Server) fallbackServer(ctx context.Context, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
}

// Run serves until ctx is done or the main listener fails, then closes
// the site. It returns nil after a shutdown asked through ctx.
func (s *Server) Run(ctx context.Context) error {
	select {
	case <-s.served:
		s.Close()
		return fmt.Errorf("http server: %w", s.serveErr)
	case <-ctx.Done():
	}
	s.log.Info("shutting down", "timeout", s.cfg.ShutdownTimeout)
	if err := s.Close(); err != nil {
		return err
	}
	s.log.Info("stopped")
	return nil
}

// Close shuts the site down: in-flight requests get up to the shutdown
// timeout, then the simulated VDAs, the broker and the site DB stop and
// the data directory is unlocked. It is safe to call more than once.
func (s *Server) Close() error {
	s.close.Do(func() { s.closeErr = s.shutdown(s.cfg.ShutdownTimeout) })
	return s.closeErr
}

func (s *Server) shutdown(timeout time.Duration) error {
	var err error
	if s.stopStreams != nil {
		s.stopStreams()
	}
	if s.gateway != nil {
		// Displays are hijacked connections, which the HTTP server's
		// shutdown does not wait for: they end first, each side told.
		s.gateway.Close()
	}
	if s.srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), timeout)
		if serr := s.srv.Shutdown(sctx); serr != nil {
			s.srv.Close()
		}
		cancel()
		<-s.served
		if !errors.Is(s.serveErr, http.ErrServerClosed) {
			err = s.serveErr
		}
		s.srv = nil
	}
	for i := len(s.cleanup) - 1; i >= 0; i-- {
		s.cleanup[i]()
	}
	s.cleanup = nil
	return err
}

// SiteDB names the site DB: the SQLite file, or the PostgreSQL database
// without its password.
func (s *Server) SiteDB() string { return s.siteDB }

// Name and Zone are the broker's name and zone in the site.
func (s *Server) Name() string { return s.name }
func (s *Server) Zone() string { return s.zone }

// Addr is the main listener's address, host:port.
func (s *Server) Addr() string { return s.addr }

// HandedOver reports whether this broker hands its brokering to its
// zone's leader and has handed it its sessions, so that the leader's
// launches know them.
func (s *Server) HandedOver() bool {
	return s.leader != nil && s.leader.HandedOver()
}

// URL is the main listener's base URL: https:// with TLS.
func (s *Server) URL() string {
	if s.tls != nil {
		return "https://" + s.addr
	}
	return "http://" + s.addr
}

// NFuseAddr is the NFuse listener's address, "" when there is none.
func (s *Server) NFuseAddr() string { return s.nfuseAddr }

// NFuseURL is the NFuse listener's base URL, "" when there is none.
func (s *Server) NFuseURL() string {
	if s.nfuseAddr == "" {
		return ""
	}
	if s.tls != nil {
		return "https://" + s.nfuseAddr
	}
	return "http://" + s.nfuseAddr
}

// DataDir is the data directory's absolute path.
func (s *Server) DataDir() string { return s.dataDir }

// EnrolmentSecret returns the secret VDAs enrol with and its file.
func (s *Server) EnrolmentSecret() (secret, path string) { return s.secret, s.secretPath }

// DemoPassword is the password Open set on the demo accounts, "" when it
// set none (no demo site, or a kept one).
func (s *Server) DemoPassword() string { return s.demoPassword }

// Store is the site DB.
func (s *Server) Store() site.Store { return s.store }

// LHC is the broker's Local Host Cache, nil on an embedded site DB.
func (s *Server) LHC() *lhc.Store { return s.lhc }

// Broker is the site's broker.
func (s *Server) Broker() *broker.Broker { return s.broker }

// startSimulator runs simulated VDAs for the site's first machines against
// this server, and returns a function that stops them and waits.
func (s *Server) startSimulator(ctx context.Context) (func(), error) {
	names := s.broker.Snapshot().MachineNames()
	if s.desktop != nil && len(s.desktop.info.Machines) > 0 {
		names = slices.DeleteFunc(names, func(n string) bool { return slices.Contains(s.desktop.info.Machines, n) })
	}
	if n := s.cfg.SimVDAs; n > 0 && n < len(names) {
		names = names[:n]
	}
	if len(names) == 0 {
		return nil, errors.New("simulated VDAs: the site has no machines to simulate")
	}
	// The simulator reads 0 as its default and a negative delay as "at
	// once", as Config does.
	client := s.simClient(min(max(len(names)/4, 16), 256))
	sim, err := vda.NewSimulator(vda.SimConfig{Broker: s.URL(), Secret: s.secret, Machines: names, HTTPClient: client,
		LogonDelay: s.cfg.SimLogonDelay, SessionLength: s.cfg.SimSessionLength, Logger: s.log.With("role", "sim-vda")})
	if err != nil {
		return nil, fmt.Errorf("simulated VDAs: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := sim.Run(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("simulated VDAs stopped", "err", err)
		}
	}()
	s.sim = sim
	s.log.Debug("simulated VDAs started", "machines", len(names))
	return func() {
		cancel()
		<-done
		if client != nil {
			client.CloseIdleConnections()
		}
	}, nil
}

// WaitSimulated waits until every in-process simulated VDA has registered,
// or limit passes, and returns how many of how many have registered; it
// returns 0, 0 at once when the server runs none. The simulated VDAs keep
// trying after it returns.
func (s *Server) WaitSimulated(ctx context.Context, limit time.Duration) (registered, total int) {
	if s.sim == nil {
		return 0, 0
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-s.sim.AllRegistered():
	case <-t.C:
	case <-ctx.Done():
	}
	return s.sim.Registered()
}

// WaitRegistered waits until every machine of the site has registered with
// the broker, or limit passes.
func (s *Server) WaitRegistered(ctx context.Context, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		want := s.broker.Snapshot().MachineNames()
		n := 0
		err := s.store.View(ctx, func(tx site.Tx) error {
			for _, name := range want {
				if st, err := tx.MachineStatus(ctx, name); err == nil && st.Registration == site.Registered {
					n++
				}
			}
			return nil
		})
		if err == nil && n == len(want) {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("wait for registrations: %w", err)
			}
			return fmt.Errorf("%d of %d machines registered in %s", n, len(want), limit)
		case <-tick.C:
		}
	}
}

// statusSync is the broker's StatusSyncInterval: a broker alone on its
// embedded site DB knows every status change as it makes it; brokers
// sharing PostgreSQL learn each other's by reading them again.
func statusSync(cfg Config) time.Duration {
	if !IsPostgres(cfg.DB) {
		return -1
	}
	return 0 // broker.DefaultStatusSyncInterval
}

// advertise returns the address other brokers reach this one at: the
// configured one, else the listener's, with this host's name for a
// wildcard host (a peer dialling "[::]:8080" would reach itself).
func advertise(configured, listen string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("server: listener address %q: %w", listen, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
		return listen, nil
	}
	name, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("server: the listener's host is a wildcard and this host's name is unknown (set an advertised address): %w", err)
	}
	return net.JoinHostPort(name, port), nil
}
