package main

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/nfuse"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
	"github.com/usher-vdi/usher/internal/vda"
)

// Serve defaults.
const (
	DefaultListen          = "127.0.0.1:8080"
	DefaultShutdownTimeout = 10 * time.Second
	demoAdmin              = "admin"
)

type serveFlags struct {
	data, listen string
	demo         bool
	demoPassword string
	shutdown     time.Duration
	maxBodyBytes int64
	// sendBuffer is the socket send buffer of each client connection in
	// bytes, 0 for the kernel's autotuning.
	sendBuffer int64
	logs       logFlags
	// Broker timing.
	heartbeatInterval, heartbeatTimeout time.Duration
	// nfuseListen is the NFuse endpoint's own listener, "" for none.
	nfuseListen string
	// simVDAs runs that many simulated VDAs in-process, for the first
	// machines of the site; sim sets how they behave.
	simVDAs                         int
	simLogonDelay, simSessionLength time.Duration
}

func (m *Main) serve(ctx context.Context, args []string) error {
	var f serveFlags
	fs := m.flagSet("serve", "[flags]")
	data := m.dataFlag(fs)
	fs.StringVar(&f.listen, "listen", DefaultListen, "address of the HTTP listener (admin API, health)")
	fs.BoolVar(&f.demo, "demo", false, "load the demo site (400 applications, 57 machines, 1,000 users) and set demo passwords")
	fs.StringVar(&f.demoPassword, "demo-password", "", "password of the demo users and of the admin account (default: random, printed)")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", DefaultShutdownTimeout, "how long in-flight requests may run after SIGINT or SIGTERM")
	fs.Int64Var(&f.maxBodyBytes, "max-body-bytes", api.DefaultMaxBodyBytes, "largest request body accepted")
	sendBuffer := fs.String("send-buffer", fmt.Sprintf("%dKiB", DefaultSendBuffer>>10), "socket send buffer of each HTTP connection, so that a whole enumeration is written at once (0: the kernel's autotuning)")
	fs.StringVar(&f.nfuseListen, "nfuse-listen", "", "also serve the NFuse XML service (POST /scripts/wpnbr.dll) on its own listener, e.g. :8080 or :80")
	fs.IntVar(&f.simVDAs, "sim-vdas", 0, "run this many simulated VDAs in-process, for the site's first machines (-1: all of them)")
	fs.DurationVar(&f.simLogonDelay, "sim-logon-delay", vda.DefaultLogonDelay, "simulated VDAs: time from launch to the simulated user's logon")
	fs.DurationVar(&f.simSessionLength, "sim-session-length", 0, "simulated VDAs: how long a simulated user stays (0: until logged off)")
	fs.DurationVar(&f.heartbeatInterval, "heartbeat-interval", broker.DefaultHeartbeatInterval, "how often VDAs report load")
	fs.DurationVar(&f.heartbeatTimeout, "heartbeat-timeout", broker.DefaultHeartbeatTimeout, "silence after which a VDA is unregistered")
	f.logs.register(fs)
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	f.data = *data
	var err error
	if f.sendBuffer, err = block.ParseSize(*sendBuffer); err != nil || f.sendBuffer > 64<<20 {
		return usageError{fmt.Sprintf("--send-buffer %q is not a size up to 64MiB", *sendBuffer)}
	}
	if f.demoPassword != "" && !f.demo {
		return usageError{"--demo-password needs --demo"}
	}
	log, err := f.logs.logger(m.Stderr)
	if err != nil {
		return err
	}
	return m.runServe(ctx, f, log)
}

func (m *Main) runServe(ctx context.Context, f serveFlags, log *slog.Logger) error {
	st, err := m.startSite(ctx, f, log)
	if err != nil {
		return err
	}
	m.printBanner(st.Addr, st.DataDir, st.SecretPath, f.demo, st.DemoPassword)
	if m.Listening != nil {
		m.Listening("http", st.Addr)
	}
	select {
	case <-st.served:
		st.Close(f.shutdown)
		return fmt.Errorf("http server: %w", st.serveErr)
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", f.shutdown)
	if err := st.Close(f.shutdown); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// runningSite is an all-in-one site started by startSite: the usher serve
// command, and the site that usher bench measures.
type runningSite struct {
	Addr         string // the HTTP listener, host:port
	NFuseAddr    string // the --nfuse-listen listener, "" when none
	DataDir      string
	SecretPath   string // the enrolment secret's file
	Secret       string
	DemoPassword string // with --demo
	Store        site.Store
	Broker       *broker.Broker

	srv      *http.Server
	served   chan struct{} // closed when srv.Serve returns, with serveErr
	serveErr error
	cleanup  []func() // run in reverse order by Close
}

// Close shuts the site down: in-flight requests get up to timeout, then
// the simulated VDAs, the broker and the site DB stop.
func (r *runningSite) Close(timeout time.Duration) error {
	var err error
	if r.srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), timeout)
		if serr := r.srv.Shutdown(sctx); serr != nil {
			r.srv.Close()
		}
		cancel()
		<-r.served
		if !errors.Is(r.serveErr, http.ErrServerClosed) {
			err = r.serveErr
		}
		r.srv = nil
	}
	for i := len(r.cleanup) - 1; i >= 0; i-- {
		r.cleanup[i]()
	}
	r.cleanup = nil
	return err
}

// startSite opens the data directory and the site DB (loading the demo
// site with --demo), starts the broker, the HTTP listener and the
// simulated VDAs, and returns once it is serving. On error, whatever it
// started is stopped.
func (m *Main) startSite(ctx context.Context, f serveFlags, log *slog.Logger) (_ *runningSite, err error) {
	r := &runningSite{served: make(chan struct{})}
	defer func() {
		if err != nil {
			r.Close(0)
		}
	}()
	dir, err := openDataDir(f.data, true)
	if err != nil {
		return nil, err
	}
	r.cleanup = append(r.cleanup, func() { dir.Close() })
	r.DataDir = dir.path
	store, err := dir.openStore(ctx, sqlitestore.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	r.cleanup = append(r.cleanup, func() { store.Close() })
	r.Store = store
	log.Info("site DB open", "path", dir.siteDB())

	params := auth.DefaultParams
	if f.demo {
		r.DemoPassword = f.demoPassword
		if r.DemoPassword == "" {
			r.DemoPassword = auth.RandomSecret(12)
		}
		start := time.Now()
		plan, err := loadDemo(ctx, store, r.DemoPassword, params)
		if err != nil {
			return nil, fmt.Errorf("load demo site: %w", err)
		}
		c, u, d := plan.Counts()
		log.Info("demo site loaded", "created", c, "updated", u, "deleted", d, "took", time.Since(start).Round(time.Millisecond))
	}
	if err := checkAdmins(ctx, store, log); err != nil {
		return nil, err
	}

	key, err := dir.tokenKey()
	if err != nil {
		return nil, err
	}
	signer, err := auth.NewSigner(key)
	if err != nil {
		return nil, err
	}
	if r.Secret, r.SecretPath, err = dir.enrolmentSecret(); err != nil {
		return nil, err
	}

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := broker.NewMetrics()
	if err := metrics.Register(registry); err != nil {
		return nil, err
	}
	brk, err := broker.New(ctx, broker.Config{Store: store, Control: api.NewVDAControlClient(), Logger: log, Metrics: metrics,
		HeartbeatInterval: f.heartbeatInterval, HeartbeatTimeout: f.heartbeatTimeout})
	if err != nil {
		return nil, fmt.Errorf("start broker: %w", err)
	}
	r.Broker = brk
	runCtx, stopBroker := context.WithCancel(context.WithoutCancel(ctx))
	brokerDone := make(chan struct{})
	go func() { defer close(brokerDone); brk.Run(runCtx) }()
	r.cleanup = append(r.cleanup, func() { stopBroker(); <-brokerDone })

	apiServer, err := api.New(api.Config{Store: store, Logger: log, Signer: signer, PasswordParams: params, MaxBodyBytes: f.maxBodyBytes,
		Broker: brk, EnrolmentSecret: r.Secret})
	if err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.Handle("/api/", apiServer)
	mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		err := store.View(ctx, func(tx site.Tx) error { _, err := tx.ConfigVersion(ctx); return err })
		if err != nil {
			log.Warn("not ready", "err", err)
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "site DB unavailable")
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("GET /{$}", indexPage(brk))

	nf, err := nfuse.New(nfuse.Config{Broker: brk, Logger: log.With("component", "nfuse"), Observe: func(k nfuse.Kind, errorID string, d time.Duration) {
		metrics.ObserveXML(k.String(), errorID, d)
	}})
	if err != nil {
		return nil, err
	}
	// The NFuse path is matched in any case, as Citrix clients spell it variously.
	handler := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if nfuse.IsPath(req.URL.Path) {
			nf.ServeHTTP(w, req)
			return
		}
		mux.ServeHTTP(w, req)
	})

	if f.nfuseListen != "" {
		nln, err := net.Listen("tcp", f.nfuseListen)
		if err != nil {
			return nil, fmt.Errorf("listen on %s (--nfuse-listen): %w", f.nfuseListen, err)
		}
		nsrv := &http.Server{Handler: nf, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
			MaxHeaderBytes: 64 << 10, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn), ConnContext: sendBuffer(f.sendBuffer)}
		r.NFuseAddr = nln.Addr().String()
		log.Info("NFuse listening", "addr", r.NFuseAddr)
		nfDone := make(chan struct{})
		go func() { defer close(nfDone); nsrv.Serve(nln) }()
		r.cleanup = append(r.cleanup, func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if nsrv.Shutdown(sctx) != nil {
				nsrv.Close()
			}
			<-nfDone
		})
	}

	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", f.listen, err)
	}
	r.srv = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ConnContext:       sendBuffer(f.sendBuffer),
	}
	r.Addr = ln.Addr().String()
	log.Info("listening", "addr", r.Addr)
	go func() { r.serveErr = r.srv.Serve(ln); close(r.served) }()

	if f.simVDAs != 0 {
		stop, err := m.startSimulator(runCtx, f, brk, "http://"+r.Addr, r.Secret, log)
		if err != nil {
			return nil, err
		}
		r.cleanup = append(r.cleanup, stop)
	}
	return r, nil
}

// startSimulator runs simulated VDAs for the site's first machines against
// this server, and returns a function that stops them and waits.
func (m *Main) startSimulator(ctx context.Context, f serveFlags, brk *broker.Broker, base, secret string, log *slog.Logger) (func(), error) {
	names := brk.Snapshot().MachineNames()
	if f.simVDAs > 0 && f.simVDAs < len(names) {
		names = names[:f.simVDAs]
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("--sim-vdas: the site has no machines to simulate")
	}
	delay := f.simLogonDelay
	if delay == 0 {
		delay = -1 // the simulator reads 0 as its default; here it means at once
	}
	sim, err := vda.NewSimulator(vda.SimConfig{Broker: base, Secret: secret, Machines: names,
		LogonDelay: delay, SessionLength: f.simSessionLength, Logger: log.With("role", "sim-vda")})
	if err != nil {
		return nil, fmt.Errorf("simulated VDAs: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := sim.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("simulated VDAs stopped", "err", err)
		}
	}()
	log.Info("simulated VDAs started", "machines", len(names))
	return func() { cancel(); <-done }, nil
}

func (m *Main) printBanner(addr, data, secretPath string, isDemo bool, password string) {
	base := "http://" + addr
	fmt.Fprintf(m.Stdout, "usher is serving the site in %s\n\n", data)
	fmt.Fprintf(m.Stdout, "  Browser:      %s/\n", base)
	fmt.Fprintf(m.Stdout, "  Admin API:    %s/api/v1/admin/  (HTTP basic or bearer token)\n", base)
	fmt.Fprintf(m.Stdout, "  OpenAPI:      %s/api/openapi.json\n", base)
	fmt.Fprintf(m.Stdout, "  User API:     %s/api/v1/login, /api/v1/resources\n", base)
	fmt.Fprintf(m.Stdout, "  NFuse XML:    %s/scripts/wpnbr.dll\n", base)
	fmt.Fprintf(m.Stdout, "  Metrics:      %s/metrics\n", base)
	fmt.Fprintf(m.Stdout, "  Health:       %s/healthz  %s/readyz\n", base, base)
	fmt.Fprintf(m.Stdout, "  VDA enrolment secret: %s\n", secretPath)
	if isDemo {
		fmt.Fprintf(m.Stdout, "\nDemo credentials (password for all of them: %s)\n", password)
		fmt.Fprintf(m.Stdout, "  admin:        %s\n", demoAdmin)
		fmt.Fprintf(m.Stdout, "  users:        user0001 .. user1000 (domain DEMO)\n")
		fmt.Fprintf(m.Stdout, "\nTry: curl -u %s:%s %s/api/v1/admin/applications?limit=5\n", demoAdmin, password, base)
	}
	fmt.Fprintln(m.Stdout, "\nPress Ctrl-C to stop.")
}

// loadDemo applies the demo site and sets the demo password on every demo
// user and on the admin account. The hash is computed once and shared, as
// the password is; a restart with the same password changes nothing.
func loadDemo(ctx context.Context, store site.Store, password string, params auth.Params) (*site.Plan, error) {
	cfg := demo.Site()
	var plan *site.Plan
	err := store.Update(ctx, func(tx site.Tx) error {
		hash := ""
		if u, err := tx.Users().Get(ctx, cfg.Users[0].Name); err == nil && u.PasswordHash != "" {
			if ok, _ := auth.VerifyPassword(u.PasswordHash, password); ok {
				hash = u.PasswordHash
			}
		}
		if hash == "" {
			var err error
			if hash, err = auth.HashPassword(password, params); err != nil {
				return err
			}
		}
		for i := range cfg.Users {
			cfg.Users[i].PasswordHash = hash
		}
		var err error
		if plan, err = site.ApplyConfig(ctx, tx, cfg, false); err != nil {
			return err
		}
		a, err := tx.Admins().Get(ctx, demoAdmin)
		switch site.ErrorCode(err) {
		case site.ENotFound:
			return tx.Admins().Create(ctx, site.Admin{Name: demoAdmin, PasswordHash: hash, CreatedAt: time.Now().UTC()})
		case "":
			if a.PasswordHash != hash {
				a.PasswordHash = hash
				return tx.Admins().Update(ctx, a)
			}
			return nil
		default:
			return err
		}
	})
	return plan, err
}

// checkAdmins warns when no admin account exists: the admin API would be
// unusable.
func checkAdmins(ctx context.Context, store site.Store, log *slog.Logger) error {
	return store.View(ctx, func(tx site.Tx) error {
		p, err := tx.Admins().List(ctx, site.ListOptions{Limit: 1})
		if err != nil {
			return err
		}
		if p.Total == 0 {
			log.Warn("no admin account: the admin API refuses every request; create one with 'usher admin add NAME'")
		}
		return nil
	})
}

var indexTemplate = template.Must(template.New("index").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Name}} · usher</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:46rem;margin:3rem auto;padding:0 1rem;color:#222}
code{background:#f3f3f3;padding:0 .3em}table{border-collapse:collapse}td{padding:.2em 1em .2em 0}</style></head>
<body><h1>{{.Name}}</h1>
<p>An <strong>usher</strong> site (domain <code>{{.Domain}}</code>, configuration version {{.Version}}).</p>
<table>{{range .Counts}}<tr><td>{{.Kind}}</td><td>{{.N}}</td></tr>{{end}}</table>
<h2>Endpoints</h2>
<ul>
<li><a href="/api/openapi.json">/api/openapi.json</a>: the REST API, described</li>
<li><a href="/api/v1/admin/site">/api/v1/admin/site</a>: the admin API (HTTP basic with an admin account)</li>
<li><a href="/healthz">/healthz</a> and <a href="/readyz">/readyz</a></li>
</ul>
<p>The user portal and the console arrive with later releases.</p>
</body></html>`))

// indexPage describes the site from the broker's in-memory snapshot: the
// page is public, so it must not cost a site DB read.
func indexPage(brk *broker.Broker) http.HandlerFunc {
	type count struct {
		Kind string
		N    int
	}
	return func(w http.ResponseWriter, r *http.Request) {
		snap := brk.Snapshot()
		data := struct {
			Name, Domain string
			Version      int64
			Counts       []count
		}{Name: snap.Settings.Name, Domain: snap.Settings.Domain, Version: snap.Version}
		n := snap.Counts()
		for _, k := range []site.Kind{site.KindZone, site.KindCatalog, site.KindMachine, site.KindDeliveryGroup,
			site.KindApplication, site.KindDesktop, site.KindUser, site.KindGroup, site.KindEntitlement} {
			data.Counts = append(data.Counts, count{string(k) + "s", n[k]})
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		indexTemplate.Execute(w, data)
	}
}

// DefaultSendBuffer is the socket send buffer of client connections. An
// enumeration of 400 applications is 110 KB: with the kernel's initial
// 16 KB the server writes it in pieces, waking up for each as the client
// drains the last, which at thousands of connections costs a quarter of
// the throughput and doubles p99 (bench enumerate at 2,000 connections).
const DefaultSendBuffer = 256 << 10

// sendBuffer returns a ConnContext hook that sets each TCP connection's
// send buffer to n bytes (the kernel doubles it for its bookkeeping),
// or leaves the kernel's autotuning when n is 0.
func sendBuffer(n int64) func(context.Context, net.Conn) context.Context {
	return func(ctx context.Context, c net.Conn) context.Context {
		if tc, ok := c.(*net.TCPConn); ok && n > 0 {
			tc.SetWriteBuffer(int(n))
		}
		return ctx
	}
}
