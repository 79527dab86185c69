package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/usher-vdi/usher/internal/displaybench"
	"github.com/usher-vdi/usher/internal/gateway"
	"github.com/usher-vdi/usher/internal/site"
)

// benchDisplay runs issue 36's figures: WebSocket viewers through usher's
// display gateway and through websockify, in the same run.
func (m *Main) benchDisplay(ctx context.Context, args []string) error {
	fs := m.flagSet("bench display", "[flags]\n\nN WebSocket viewers on loopback pull a scripted RFB-like stream (8 KiB messages paced to --rate) straight from\n"+
		"the source, then through usher's display gateway (its own process: the gateway's splice, no broker), then through\n"+
		"websockify (a process per connection) in front of the same source over TCP, the same N, rate and duration each:\n"+
		"the proxies' CPU from /proc (sessions per CPU-second, sessions at the rate per core), echo round trips (added p50,\n"+
		"p99), the viewers' own CPU, and every session's bytes checked (CRC-32C).")
	sessions := fs.Int("sessions", displaybench.DefaultSessions, "viewers at once")
	rate := fs.String("rate", "2Mbit", "each viewer's stream (2Mbit, 500kbit, 250KB: bytes per second)")
	duration := fs.Duration("duration", displaybench.DefaultDuration, "the steady window of each way")
	msg := fs.Int("message", displaybench.DefaultMessageBytes, "bytes per scripted message")
	ping := fs.Duration("ping", displaybench.DefaultPingInterval, "each viewer's echo interval")
	echoes := fs.Int("echoes", displaybench.DefaultProbeEchoes, "sequential echoes of the idle probe after each way's load")
	websockify := fs.String("websockify", "/usr/bin/websockify", "websockify program for the yardstick (\"\" to skip; skipped with a note when missing)")
	out := fs.String("out", filepath.Join("usher-bench", "display"), "report directory: report.{md,json,csv,html} and result.json (\"\" for none)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the bench process (viewers and source; the proxies are other processes) to this file")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	r, err := displaybench.ParseRate(*rate)
	if err != nil {
		return usageError{"--rate: " + err.Error()}
	}
	switch {
	case *sessions < 1 || *sessions > 5000:
		return usageError{"--sessions must be 1 to 5000"}
	case *duration <= 0 || *duration > time.Hour:
		return usageError{"--duration must be positive, at most 1h"}
	case *ping <= 0 || *echoes < 1:
		return usageError{"--ping and --echoes must be positive"}
	}
	ws := *websockify
	if ws != "" {
		if p, err := exec.LookPath(ws); err == nil {
			ws = p
		} else {
			fmt.Fprintf(m.Stderr, "usher bench display: %s not found, the yardstick is skipped (apt-get install -y websockify)\n", ws)
			ws = ""
		}
	}
	self := m.self()
	if self == nil {
		return errors.New("bench display: cannot find this program to run the gateway")
	}
	stop, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	res, err := displaybench.Run(ctx, displaybench.Config{Sessions: *sessions, Rate: r, MessageBytes: *msg, Duration: *duration,
		PingInterval: *ping, ProbeEchoes: *echoes, Websockify: ws, Gateway: append(append([]string{}, self...), "bench", "display-gateway"), Progress: m.Stderr})
	stop()
	if res == nil {
		return err
	}
	rep := res.Report(shellCommand(append([]string{"usher", "bench", "display"}, args...)...))
	fmt.Fprintln(m.Stdout)
	if werr := rep.WriteText(m.Stdout); werr != nil {
		return werr
	}
	for _, h := range rep.Headlines {
		fmt.Fprintf(m.Stdout, "\n%s\n  usher: %s\n  yardstick: %s\n  ratio: %s\n", h.What, h.Usher, h.Yardstick, h.Ratio)
	}
	if werr := m.writeBlockBench(rep, *out, res); werr != nil {
		return werr
	}
	return err
}

// benchDisplayGateway is the gateway of 'usher bench display', in its
// own process so that its CPU is measured alone: gateway.New as usher
// serve mounts it, with a bearer token (from the environment) standing
// for the portal's session and a fixed table for the broker.
func (m *Main) benchDisplayGateway(ctx context.Context, args []string) error {
	fs := m.flagSet("bench display-gateway", "--listen ADDR --agent URL\n\nThe gateway of 'usher bench display', which runs it in its own process: every session s-N is at the agent URL;\nviewers show the token of $"+displaybench.TokenEnv+" as a bearer token.")
	listen := fs.String("listen", "127.0.0.1:0", "address to serve at")
	agent := fs.String("agent", "", "control URL of the agent that serves every session")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	token := m.Getenv(displaybench.TokenEnv)
	if *agent == "" || token == "" {
		return usageError{"bench display-gateway needs --agent and $" + displaybench.TokenEnv}
	}
	gw, err := gateway.New(gateway.Config{
		Authenticate: func(r *http.Request) (string, error) {
			if r.Header.Get("Authorization") != "Bearer "+token {
				return "", site.Errorf(site.EUnauthorized, "no token")
			}
			return "viewer-" + r.PathValue("id"), nil
		},
		Resolver:    displaybench.GatewayTarget(*agent),
		MaxSessions: -1,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	srv.Close()
	gw.Close()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
