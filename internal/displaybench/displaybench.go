// Package displaybench is `usher bench display` (issue 36): N WebSocket
// viewers on loopback pull a scripted RFB-like stream (8 KiB messages
// paced to a rate) through usher's display gateway, in its own process,
// and through websockify, the yardstick, in the same run; and straight
// from the source, the baseline of latency and the client's cost. It
// measures each proxy's CPU from /proc, the viewers' echo round trips,
// and checks that every session's bytes arrived unchanged (CRC-32C of
// the frames against the source's). cmd/usher runs it; only it imports
// this package.
package displaybench

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/usher-vdi/usher/internal/benchkit"
	"github.com/usher-vdi/usher/internal/gateway"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// TokenEnv carries the bearer token the bench's gateway process takes
// from the viewers (its stand-in for a portal session).
const TokenEnv = "USHER_BENCH_DISPLAY_TOKEN"

// Defaults of Config.
const (
	DefaultSessions     = 200
	DefaultRate         = 250_000 // bytes per second: 2 Mbit/s
	DefaultMessageBytes = 8 << 10
	DefaultDuration     = 10 * time.Second
	DefaultPingInterval = 100 * time.Millisecond
)

// Config configures a Run.
type Config struct {
	Sessions     int
	Rate         int64 // bytes per second each session pulls
	MessageBytes int   // size of each scripted message
	Duration     time.Duration
	PingInterval time.Duration // each viewer's echo round trips
	// ProbeEchoes is the number of sequential echoes of the idle probe
	// (default DefaultProbeEchoes).
	ProbeEchoes int
	// Websockify is the websockify program; "" runs no yardstick.
	Websockify string
	// Gateway is the command line that runs the gateway process (usher
	// bench display-gateway); the bench adds --listen and --agent.
	Gateway  []string
	Progress io.Writer
}

// Proxy is what one way to the source measured.
type Proxy struct {
	Name     string   `json:"name"`
	Sessions int      `json:"sessions"`
	Opened   int      `json:"opened"`
	Verified int      `json:"verified"` // sessions whose frames arrived unchanged (CRC-32C and count)
	Errors   []string `json:"errors,omitempty"`
	// DeliveredBps is the mean bytes per second a session received over
	// the steady window.
	DeliveredBps float64 `json:"delivered_bytes_per_second"`
	// Proxy CPU (zero for the direct way): opening the sessions, the
	// steady window, and the whole life of the sessions (open, stream,
	// close).
	OpenCPU    time.Duration `json:"open_cpu_ns"`
	SteadyCPU  time.Duration `json:"steady_cpu_ns"`
	TotalCPU   time.Duration `json:"total_cpu_ns"`
	SteadyWall time.Duration `json:"steady_wall_ns"`
	// ClientCPU is the bench process's (viewers and source) over the
	// steady window, ClientWall that window as it read it.
	ClientCPU  time.Duration `json:"client_cpu_ns"`
	ClientWall time.Duration `json:"client_wall_ns"`
	Pings      int           `json:"pings"`
	RTTP50     time.Duration `json:"rtt_p50_ns"`
	RTTP99     time.Duration `json:"rtt_p99_ns"`
	// IdleRTTP50 and IdleRTTP99 are one session's sequential echoes
	// (Config.ProbeEchoes) once the others have closed: the proxy idle.
	IdleRTTP50 time.Duration `json:"idle_rtt_p50_ns"`
	IdleRTTP99 time.Duration `json:"idle_rtt_p99_ns"`
	Measured   bool          `json:"proxy_cpu_measured"`
	Process    string        `json:"process,omitempty"`
}

// ProxyCores is the proxy's CPU over the steady window per wall time.
func (p Proxy) ProxyCores() float64 { return frac(p.SteadyCPU, p.SteadyWall) }

// ClientCores is the bench process's.
func (p Proxy) ClientCores() float64 { return frac(p.ClientCPU, p.ClientWall) }

func frac(cpu, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return cpu.Seconds() / wall.Seconds()
}

// Result is a Run's.
type Result struct {
	Sessions     int           `json:"sessions"`
	Rate         int64         `json:"rate_bytes_per_second"`
	MessageBytes int           `json:"message_bytes"`
	Duration     time.Duration `json:"duration_ns"`
	PingInterval time.Duration `json:"ping_interval_ns"`
	ProbeEchoes  int           `json:"probe_echoes"`
	CPUs         string        `json:"cpus"`
	LoadAvg      string        `json:"loadavg"`     // /proc/loadavg's 1, 5 and 15 minutes at the start
	LoadAvgEnd   string        `json:"loadavg_end"` // and at the end
	Websockify   string        `json:"websockify,omitempty"`
	Note         string        `json:"note,omitempty"`
	Proxies      []Proxy       `json:"proxies"`
}

// Proxy returns the named proxy's figures, or nil.
func (r *Result) Proxy(name string) *Proxy {
	for i := range r.Proxies {
		if r.Proxies[i].Name == name {
			return &r.Proxies[i]
		}
	}
	return nil
}

// Names of the ways to the source.
const (
	Direct     = "direct"
	Gateway    = "usher gateway"
	Websockify = "websockify"
)

// bench holds a run's sources.
type bench struct {
	cfg     Config
	cur     atomic.Pointer[round]
	tickets sync.Map
	base    time.Time
	client  *http.Client
	agent   string // host:port of the agent (the display contract)
	tcp     string // host:port of the plain TCP source (websockify's target)
}

// Run runs the bench: direct, then the gateway, then websockify.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.Sessions = cmp.Or(cfg.Sessions, DefaultSessions)
	cfg.Rate = cmp.Or(cfg.Rate, DefaultRate)
	cfg.MessageBytes = cmp.Or(cfg.MessageBytes, DefaultMessageBytes)
	cfg.Duration = cmp.Or(cfg.Duration, DefaultDuration)
	cfg.PingInterval = cmp.Or(cfg.PingInterval, DefaultPingInterval)
	cfg.ProbeEchoes = cmp.Or(cfg.ProbeEchoes, DefaultProbeEchoes)
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.MessageBytes <= hdrLen+8 || cfg.MessageBytes > maxRecord {
		return nil, fmt.Errorf("message size %d: want %d to %d bytes", cfg.MessageBytes, hdrLen+9, maxRecord)
	}
	if len(cfg.Gateway) == 0 {
		return nil, errors.New("no gateway command")
	}
	plan := benchkit.PlanCPUs()
	res := &Result{Sessions: cfg.Sessions, Rate: cfg.Rate, MessageBytes: cfg.MessageBytes, Duration: cfg.Duration,
		PingInterval: cfg.PingInterval, ProbeEchoes: cfg.ProbeEchoes, CPUs: "not pinned (one CPU)", LoadAvg: loadAvg()}
	if plan.Pinned() {
		// The bench process (viewers and sources) on the client CPU, the
		// proxies on the others.
		restore, err := benchkit.Plan{Client: plan.Client, Server: plan.Client}.PinServer()
		if err != nil {
			return nil, err
		}
		defer restore()
		res.CPUs = fmt.Sprintf("viewers and sources (the bench process) on CPU %s, the proxy on CPU %s",
			benchkit.CPUList(plan.Client), benchkit.CPUList(plan.Server))
	}
	defer func() { res.LoadAvgEnd = loadAvg() }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b := &bench{cfg: cfg, base: time.Now(),
		client: &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}}
	var wg sync.WaitGroup
	defer wg.Wait()
	agentLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { b.display(ctx, w, r) }),
		ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	wg.Go(func() { srv.Serve(agentLn) })
	defer srv.Close()
	tcpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer tcpLn.Close()
	wg.Go(func() {
		for {
			c, err := tcpLn.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { b.cur.Load().serve(ctx, c) })
		}
	})
	b.agent, b.tcp = agentLn.Addr().String(), tcpLn.Addr().String()

	fmt.Fprintf(cfg.Progress, "usher bench display: %d sessions straight from the source\n", cfg.Sessions)
	p, err := b.run(ctx, Direct, b.dialDirect, nil, nil)
	if err != nil {
		return nil, err
	}
	res.Proxies = append(res.Proxies, p)

	fmt.Fprintf(cfg.Progress, "usher bench display: %d sessions through usher's gateway\n", cfg.Sessions)
	if p, err = b.runGateway(ctx, plan); err != nil {
		return res, err
	}
	res.Proxies = append(res.Proxies, p)

	if cfg.Websockify == "" {
		res.Note = "websockify not found: no yardstick in this run (apt-get install -y websockify)"
		return res, nil
	}
	res.Websockify = websockifyVersion(cfg.Websockify)
	fmt.Fprintf(cfg.Progress, "usher bench display: %d sessions through websockify\n", cfg.Sessions)
	if p, err = b.runWebsockify(ctx, plan); err != nil {
		return res, err
	}
	res.Proxies = append(res.Proxies, p)
	return res, nil
}

func (b *bench) runGateway(ctx context.Context, plan benchkit.Plan) (Proxy, error) {
	addr, err := benchkit.FreeAddr()
	if err != nil {
		return Proxy{}, err
	}
	token := randomToken()
	argv := append(slices.Clone(b.cfg.Gateway), "--listen", addr, "--agent", "http://"+b.agent)
	proc, err := benchkit.StartProc(ctx, benchkit.ProcSpec{Name: "usher bench display-gateway", Argv: argv,
		Env: []string{TokenEnv + "=" + token}, CPUs: plan.Server, Addr: addr})
	if err != nil {
		return Proxy{}, err
	}
	defer proc.Kill()
	dial := func(ctx context.Context, i int) (net.Conn, error) {
		u := "ws://" + addr + gateway.Path(fmt.Sprintf("s-%d", i))
		return b.dialWS(ctx, u, http.Header{"Authorization": {"Bearer " + token}}, b.ticket())
	}
	p, err := b.run(ctx, Gateway, dial, benchkit.TreeCPUReaped(proc.Pid()), nil)
	if err != nil {
		return p, err
	}
	p.Process = "usher bench display-gateway: gateway.New with a fixed table of sessions (the gateway's splice alone, no broker), its own process"
	if err := proc.Stop(); err != nil {
		return p, err
	}
	return p, nil
}

func (b *bench) runWebsockify(ctx context.Context, plan benchkit.Plan) (Proxy, error) {
	addr, err := benchkit.FreeAddr()
	if err != nil {
		return Proxy{}, err
	}
	proc, err := benchkit.StartProc(ctx, benchkit.ProcSpec{Name: "websockify", Argv: []string{b.cfg.Websockify, addr, b.tcp},
		CPUs: plan.Server, Addr: addr})
	if err != nil {
		return Proxy{}, err
	}
	defer proc.Kill()
	dial := func(ctx context.Context, _ int) (net.Conn, error) { return b.dialWS(ctx, "ws://"+addr+"/", nil, "") }
	// websockify forks a process per connection: the sessions' cost is
	// only all counted once the children have exited and been waited for.
	settle := func() { waitChildren(proc.Pid(), 30*time.Second) }
	p, err := b.run(ctx, Websockify, dial, benchkit.TreeCPUReaped(proc.Pid()), settle)
	if err != nil {
		return p, err
	}
	p.Process = "websockify (default: a process forked per connection), its whole process tree and the children it waited for"
	proc.Kill()
	return p, nil
}

func (b *bench) dialDirect(ctx context.Context, _ int) (net.Conn, error) {
	return b.dialWS(ctx, "ws://"+b.agent+vdaproto.PathDisplay, nil, b.ticket())
}

// ticket issues a single-use ticket that the agent takes.
func (b *bench) ticket() string {
	t := randomToken()
	b.tickets.Store(t, true)
	return t
}

func randomToken() string {
	var k [16]byte
	rand.Read(k[:])
	return fmt.Sprintf("%x", k)
}

// dialWS opens a viewer's WebSocket, offering the display's subprotocol
// (and the ticket's, when set), and returns its binary stream.
func (b *bench) dialWS(ctx context.Context, u string, h http.Header, ticket string) (net.Conn, error) {
	protos := []string{vdaproto.DisplaySubprotocol}
	if ticket != "" {
		protos = append(protos, vdaproto.TicketSubprotocol(ticket))
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(dctx, u, &websocket.DialOptions{HTTPClient: b.client, HTTPHeader: h, Subprotocols: protos,
		CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("dial %s: %d: %w", u, resp.StatusCode, err)
		}
		return nil, fmt.Errorf("dial %s: %w", u, err)
	}
	if c.Subprotocol() != vdaproto.DisplaySubprotocol {
		c.CloseNow()
		return nil, fmt.Errorf("dial %s: subprotocol %q selected", u, c.Subprotocol())
	}
	c.SetReadLimit(2 * maxRecord)
	return websocket.NetConn(ctx, c, websocket.MessageBinary), nil
}

// display is the agent's side of the display contract: the ticket in
// its subprotocol, spent once; vdaproto.DisplaySubprotocol selected.
func (b *bench) display(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != vdaproto.PathDisplay {
		http.NotFound(w, r)
		return
	}
	offered := r.Header.Values("Sec-WebSocket-Protocol")
	ticket := vdaproto.TicketFromSubprotocols(offered)
	if _, ok := b.tickets.LoadAndDelete(ticket); ticket == "" || !ok {
		var e vdaproto.ErrorBody
		e.Error.Code, e.Error.Message = "unauthorized", "the ticket is unknown, used or expired"
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		json.NewEncoder(w).Encode(e)
		return
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{vdaproto.DisplaySubprotocol}})
	if err != nil {
		return
	}
	if c.Subprotocol() != vdaproto.DisplaySubprotocol {
		c.Close(websocket.StatusProtocolError, "the display's subprotocol is "+vdaproto.DisplaySubprotocol)
		return
	}
	c.SetReadLimit(2 * maxRecord)
	b.cur.Load().serve(ctx, websocket.NetConn(ctx, c, websocket.MessageBinary))
}

type dialFunc func(ctx context.Context, i int) (net.Conn, error)

// openAtOnce bounds the sessions being opened at once; openWait how
// long they may take.
const (
	openAtOnce = 32
	openWait   = 2 * time.Minute
)

// run measures one way to the source: open every session, stream for
// the duration, end. meter is the proxy's CPU (nil: none); settle, when
// set, waits for the proxy to be done with the sessions closed.
func (b *bench) run(ctx context.Context, name string, dial dialFunc, meter benchkit.Meter, settle func()) (Proxy, error) {
	n := b.cfg.Sessions
	r := newRound(b.cfg.MessageBytes, b.cfg.Rate)
	b.cur.Store(r)
	p := Proxy{Name: name, Sessions: n, Measured: meter != nil}
	// The sessions' connections end with rctx: a way that hangs is cut
	// off (openWait for the opens, endWait and a margin for the ends).
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	read := func() (benchkit.Usage, benchkit.Usage, error) {
		self, err := benchkit.SelfCPU()
		if err != nil || meter == nil {
			return benchkit.Usage{}, self, err
		}
		u, err := meter()
		return u, self, err
	}
	p0, _, err := read()
	if err != nil {
		return p, err
	}
	var (
		opened   sync.WaitGroup
		done     sync.WaitGroup
		okOpen   atomic.Int64
		received atomic.Int64
		sem      = make(chan struct{}, openAtOnce)
		viewers  = make([]*viewer, n)
	)
	opened.Add(n)
	for i := range n {
		done.Go(func() {
			sem <- struct{}{}
			release := sync.OnceFunc(func() { <-sem; opened.Done() })
			defer release()
			c, err := dial(rctx, i)
			if err != nil {
				viewers[i] = &viewer{err: err}
				return
			}
			viewers[i] = view(c, func() { okOpen.Add(1); release() }, r.start, r.stop, b.cfg.PingInterval, &received, b.base)
		})
	}
	cut := time.AfterFunc(openWait, rcancel)
	opened.Wait()
	cut.Stop()
	p.Opened = int(okOpen.Load())
	p1, _, err := read()
	if err != nil {
		close(r.stop)
		done.Wait()
		return p, err
	}
	close(r.start)
	// The bytes and their instant first, at once; then the CPU (reading
	// /proc for a process tree may take a while on a loaded machine).
	b2, t2 := received.Load(), time.Now()
	p2, s2, err2 := read()
	select {
	case <-time.After(b.cfg.Duration):
	case <-ctx.Done():
	}
	b3, t3 := received.Load(), time.Now()
	p3, s3, err3 := read()
	close(r.stop)
	cut = time.AfterFunc(endWait+30*time.Second, rcancel)
	done.Wait()
	cut.Stop()
	if settle != nil {
		settle()
	}
	p4, _, err4 := read()
	if err := cmp.Or(err2, err3, err4, ctx.Err()); err != nil {
		return p, err
	}
	idle, err := b.probe(ctx, dial, n)
	if err != nil {
		return p, fmt.Errorf("%s: the idle echoes: %w", name, err)
	}
	p.IdleRTTP50, p.IdleRTTP99 = quantile(idle, 0.50), quantile(idle, 0.99)
	p.OpenCPU, p.TotalCPU = p1.Sub(p0).CPU(), p4.Sub(p0).CPU()
	steady := p3.Sub(p2)
	p.SteadyCPU, p.SteadyWall = steady.CPU(), steady.Wall
	client := s3.Sub(s2)
	p.ClientCPU, p.ClientWall = client.CPU(), client.Wall
	if w := t3.Sub(t2); w > 0 && n > 0 {
		p.DeliveredBps = float64(b3-b2) / w.Seconds() / float64(n)
	}
	var rtts []time.Duration
	for _, v := range viewers {
		if v.verified {
			p.Verified++
		}
		if v.err != nil && len(p.Errors) < 5 {
			p.Errors = append(p.Errors, v.err.Error())
		}
		rtts = append(rtts, v.rtts...)
	}
	slices.Sort(rtts)
	p.Pings = len(rtts)
	p.RTTP50, p.RTTP99 = quantile(rtts, 0.50), quantile(rtts, 0.99)
	return p, nil
}

// DefaultProbeEchoes is Config.ProbeEchoes's default.
const DefaultProbeEchoes = 1000

// probe opens one more session, streaming nothing, and times
// Config.ProbeEchoes echoes one after the other, sorted.
func (b *bench) probe(ctx context.Context, dial dialFunc, i int) ([]time.Duration, error) {
	r := newRound(b.cfg.MessageBytes, b.cfg.Rate)
	b.cur.Store(r)
	defer close(r.stop)
	c, err := dial(ctx, i)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	br := bufio.NewReader(c)
	if typ, _, err := readRecord(br, nil); err != nil || typ != recHello {
		return nil, fmt.Errorf("no hello: %q, %v", typ, err)
	}
	rtts := make([]time.Duration, 0, b.cfg.ProbeEchoes)
	ping := record(nil, recPing, make([]byte, 8))
	var buf []byte
	for range b.cfg.ProbeEchoes {
		t0 := time.Now()
		if _, err := c.Write(ping); err != nil {
			return nil, err
		}
		typ, p, err := readRecord(br, buf[:0])
		if err != nil || typ != recPong {
			return nil, fmt.Errorf("no echo: %q, %v", typ, err)
		}
		buf = p
		rtts = append(rtts, time.Since(t0))
	}
	slices.Sort(rtts)
	return rtts, nil
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// waitChildren waits until process pid has no children left (exited and
// waited for), at most d.
func waitChildren(pid int, d time.Duration) {
	path := fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		b, err := os.ReadFile(path)
		if err != nil || strings.TrimSpace(string(b)) == "" {
			return
		}
		time.Sleep(20 * time.Millisecond) // a poll interval
	}
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// websockifyVersion names the websockify package that provides path,
// when dpkg knows it.
func websockifyVersion(path string) string {
	b, err := os.ReadFile("/var/lib/dpkg/status")
	if err != nil {
		return path
	}
	for _, para := range strings.Split(string(b), "\n\n") {
		if strings.HasPrefix(para, "Package: websockify\n") {
			for _, l := range strings.Split(para, "\n") {
				if v, ok := strings.CutPrefix(l, "Version: "); ok {
					return path + " (Debian websockify " + v + ")"
				}
			}
		}
	}
	return path
}

// ParseRate reads a rate per session: "2Mbit", "500kbit", "250KB" (bytes
// per second), or a plain number of bytes per second.
func ParseRate(s string) (int64, error) {
	t := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(s)), "/s")
	units := []struct {
		suffix string
		mult   float64
	}{{"gbit", 1e9 / 8}, {"mbit", 1e6 / 8}, {"kbit", 1e3 / 8}, {"bit", 1.0 / 8}, {"mb", 1e6}, {"kb", 1e3}, {"b", 1}, {"", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
			if err != nil || v <= 0 {
				break
			}
			return int64(v * u.mult), nil
		}
	}
	return 0, fmt.Errorf("%q is not a rate (2Mbit, 500kbit, 250KB)", s)
}

// GatewayTarget is the fixed table of the bench's gateway process: every
// session "s-N" is on the one agent at agentURL.
func GatewayTarget(agentURL string) gateway.Resolver { return fixedResolver(agentURL) }

type fixedResolver string

func (f fixedResolver) Resolve(_ context.Context, _, id string) (gateway.Target, error) {
	if !strings.HasPrefix(id, "s-") {
		return gateway.Target{}, site.Errorf(site.ENotFound, "no such session")
	}
	return gateway.Target{Machine: "bench-agent", URL: string(f)}, nil
}
