package displaybench

import (
	"fmt"
	"time"

	"github.com/usher-vdi/usher/internal/loadgen"
)

// Goals of issue 36.
const (
	GoalRatio          = 5.0 // the gateway's sessions per CPU-second over websockify's
	GoalSessionsPerCPU = 500 // sessions at 2 Mbit/s per core
	GoalAddedP99       = time.Millisecond
)

// SessionsPerCPUSecond is the sessions served (opened, streamed for the
// duration at the rate, closed) per CPU-second of the proxy over their
// whole life; 0 when not measured.
func (p Proxy) SessionsPerCPUSecond() float64 {
	if !p.Measured || p.TotalCPU <= 0 {
		return 0
	}
	return float64(p.Verified) / p.TotalCPU.Seconds()
}

// SessionsPerCore is the sessions the proxy would carry at the rate on
// one fully used core: the sessions' delivered share of the rate over
// the proxy's cores in the steady window.
func (p Proxy) SessionsPerCore(rate int64) float64 {
	c := p.ProxyCores()
	if !p.Measured || c <= 0 || rate <= 0 {
		return 0
	}
	return float64(p.Sessions) * p.DeliveredBps / float64(rate) / c
}

// OpenCPUPerSession is the proxy's CPU per session opened.
func (p Proxy) OpenCPUPerSession() time.Duration {
	if p.Opened == 0 {
		return 0
	}
	return p.OpenCPU / time.Duration(p.Opened)
}

// CPUPerMB is the proxy's CPU in the steady window per MB (10^6 bytes)
// of frames delivered: what a starved proxy, moving fewer bytes, still
// tells of its cost.
func (p Proxy) CPUPerMB() time.Duration {
	mb := p.DeliveredBps * float64(p.Sessions) * p.SteadyWall.Seconds() / 1e6
	if !p.Measured || mb <= 0 {
		return 0
	}
	return time.Duration(float64(p.SteadyCPU) / mb)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()*1e3) }

func mbit(bps float64) string { return fmt.Sprintf("%.3f", bps*8/1e6) }

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

// Report returns the result as a report directory's contents.
func (r *Result) Report(command string) *loadgen.Report {
	rep := loadgen.NewReport("usher bench display: WebSocket viewers through usher's display gateway beside websockify", command)
	t := loadgen.Table{
		Title: fmt.Sprintf("%d viewers, each pulling %s Mbit/s in %d-byte messages for %s, echo every %s", r.Sessions, mbit(float64(r.Rate)),
			r.MessageBytes, r.Duration, r.PingInterval),
		Header: []string{"way", "opened", "verified", "Mbit/s per session", "rate held", "proxy cores", "sessions per core at rate",
			"proxy CPU ms/MB", "sessions per CPU-second", "open CPU ms/session", "RTT p50 ms", "RTT p99 ms", "added p50 ms", "added p99 ms",
			"idle RTT p50 ms", "idle RTT p99 ms", "idle added p50 ms", "idle added p99 ms", "bench process cores"},
	}
	direct := r.Proxy(Direct)
	for _, p := range r.Proxies {
		row := []string{p.Name, fmt.Sprint(p.Opened), fmt.Sprintf("%d/%d", p.Verified, p.Sessions), mbit(p.DeliveredBps),
			fmt.Sprintf("%.0f%%", 100*p.DeliveredBps/float64(r.Rate))}
		if p.Measured {
			row = append(row, fmt.Sprintf("%.3f", p.ProxyCores()), fmt.Sprintf("%.0f", p.SessionsPerCore(r.Rate)), ms(p.CPUPerMB()),
				fmt.Sprintf("%.1f", p.SessionsPerCPUSecond()), ms(p.OpenCPUPerSession()))
		} else {
			row = append(row, "-", "-", "-", "-", "-")
		}
		row = append(row, ms(p.RTTP50), ms(p.RTTP99))
		if direct != nil && p.Name != Direct {
			row = append(row, ms(p.RTTP50-direct.RTTP50), ms(p.RTTP99-direct.RTTP99))
		} else {
			row = append(row, "-", "-")
		}
		row = append(row, ms(p.IdleRTTP50), ms(p.IdleRTTP99))
		if direct != nil && p.Name != Direct {
			row = append(row, ms(p.IdleRTTP50-direct.IdleRTTP50), ms(p.IdleRTTP99-direct.IdleRTTP99))
		} else {
			row = append(row, "-", "-")
		}
		row = append(row, fmt.Sprintf("%.3f", p.ClientCores()))
		t.Rows = append(t.Rows, row)
	}
	rep.Tables = []loadgen.Table{t}
	rep.CSV = &t
	rep.Notes = append(rep.Notes,
		"The gateway: `usher bench display-gateway`, gateway.New (the code `usher serve` mounts at GET /api/v1/sessions/{id}/display) in its own process, "+
			"with a bearer token for the portal session and a fixed table of sessions for the broker: the gateway's splice alone, no broker or site DB. "+
			"It dials the bench's agent of the display contract (ticket in the subprotocol, spent once, `binary` selected) over ws:// on loopback. "+
			"websockify runs as Debian ships it (a process forked per connection) in front of the same source over plain TCP.",
		"Proxy CPU: utime+stime from /proc of the proxy's process tree, plus cutime+cstime (children that exited and were waited for; "+
			"websockify's per-connection processes), read before the opens, after them, around the steady window and after every session closed "+
			"(websockify: once it has no children left). USER_HZ is 100: each process's reading is in 10 ms ticks.",
		"sessions per CPU-second: sessions verified over the proxy's CPU for their whole life (open, stream for the duration at the rate, close). "+
			"proxy CPU ms/MB: the proxy's CPU in the steady window per 10^6 bytes of frames delivered. sessions per core at rate: sessions × (delivered rate / target rate) over the proxy's cores in the steady window: "+
			"the sessions one fully used core would carry at that rate, linearly.",
		"RTT: each viewer's 13-byte echo record every ping interval, answered by the source in the stream, under the full load; "+
			"added = the way's percentile minus the direct way's (viewers straight at the source's WebSocket, no proxy), not a per-pair difference. "+
			fmt.Sprintf("idle RTT: once every session has closed, one more session through the same way times %d echoes one after the other.", r.ProbeEchoes),
		"rate held: the delivered rate over the target. Where it is under 100 %, something on the way (the proxy, the bench process or the machine's "+
			"other work) did not keep up, and sessions per core at rate is extrapolated from the delivered bytes.",
		"verified: the session's frames (CRC-32C and byte count) arrived as the source sent them, its end record says so.",
		fmt.Sprintf("CPUs: %s. Load average (1, 5, 15 min) at the start: %s, at the end: %s (this machine is shared with other work, "+
			"whose processes compete for both CPUs: the proxies' figures are what each got of CPU 0).", r.CPUs, r.LoadAvg, r.LoadAvgEnd))
	if r.Websockify != "" {
		rep.Notes = append(rep.Notes, "websockify: "+r.Websockify)
	}
	if r.Note != "" {
		rep.Notes = append(rep.Notes, r.Note)
	}
	rep.Headlines = r.headlines()
	return rep
}

func (r *Result) headlines() []loadgen.Headline {
	gw, ws, direct := r.Proxy(Gateway), r.Proxy(Websockify), r.Proxy(Direct)
	if gw == nil {
		return nil
	}
	client := "viewers and source in the bench process"
	if direct != nil {
		client = fmt.Sprintf("%s (%s): %.2f cores with the gateway", client, r.CPUs, gw.ClientCores())
		if ws != nil {
			client += fmt.Sprintf(", %.2f with websockify", ws.ClientCores())
		}
	}
	ceiling := ""
	if direct != nil {
		ceiling = fmt.Sprintf("straight at the source, no proxy: %s of %s Mbit/s per session delivered, %.2f cores of the bench process",
			mbit(direct.DeliveredBps), mbit(float64(r.Rate)), direct.ClientCores())
	}
	what := fmt.Sprintf("%d display sessions at %s Mbit/s for %s", r.Sessions, mbit(float64(r.Rate)), r.Duration)
	h1 := loadgen.Headline{What: "Sessions per CPU-second of the proxy, " + what + " (opened, streamed, closed)",
		Usher: fmt.Sprintf("%.1f sessions/CPU-s (%d/%d verified)", gw.SessionsPerCPUSecond(), gw.Verified, gw.Sessions), Client: client, Ceiling: ceiling}
	verdict := met(gw.SessionsPerCore(r.Rate) >= GoalSessionsPerCPU)
	if held := gw.DeliveredBps / float64(r.Rate); held < 0.95 {
		verdict = fmt.Sprintf("not assessed: the rate was not held (%.0f%% delivered), the figure is extrapolated", 100*held)
	}
	h2 := loadgen.Headline{What: "Sessions at " + mbit(float64(r.Rate)) + " Mbit/s per core of the proxy, " + what,
		Usher: fmt.Sprintf("%.0f (%.3f cores for %d sessions, %s Mbit/s each delivered, %s ms CPU/MB); goal ≥ %d: %s", gw.SessionsPerCore(r.Rate),
			gw.ProxyCores(), gw.Sessions, mbit(gw.DeliveredBps), ms(gw.CPUPerMB()), GoalSessionsPerCPU, verdict),
		Client: client, Ceiling: ceiling}
	var h3 loadgen.Headline
	if direct != nil {
		added := gw.IdleRTTP99 - direct.IdleRTTP99
		h3 = loadgen.Headline{What: fmt.Sprintf("Added echo latency through the proxy: one session's %d echoes, the proxy idle (under the load of %s: in the second part)", r.ProbeEchoes, what),
			Usher: fmt.Sprintf("+%s ms p99 (+%s ms p50; direct p99 %s ms); goal < 1 ms: %s; under the load +%s ms p99 (direct p99 %s ms)",
				ms(added), ms(gw.IdleRTTP50-direct.IdleRTTP50), ms(direct.IdleRTTP99), met(added < GoalAddedP99), ms(gw.RTTP99-direct.RTTP99), ms(direct.RTTP99)),
			Client: client, Ceiling: ceiling}
	}
	if ws != nil {
		h1.Yardstick = fmt.Sprintf("websockify %.1f sessions/CPU-s (%d/%d verified)", ws.SessionsPerCPUSecond(), ws.Verified, ws.Sessions)
		if w := ws.SessionsPerCPUSecond(); w > 0 {
			x := gw.SessionsPerCPUSecond() / w
			h1.Ratio = fmt.Sprintf("%.1f×; goal ≥ %.0f×: %s", x, GoalRatio, met(x >= GoalRatio))
		}
		h2.Yardstick = fmt.Sprintf("websockify %.0f (%.3f cores, %s Mbit/s each delivered, %s ms CPU/MB)", ws.SessionsPerCore(r.Rate), ws.ProxyCores(),
			mbit(ws.DeliveredBps), ms(ws.CPUPerMB()))
		if w := ws.SessionsPerCore(r.Rate); w > 0 && gw.CPUPerMB() > 0 {
			h2.Ratio = fmt.Sprintf("%.1f×; CPU/MB websockify / usher %.1f", gw.SessionsPerCore(r.Rate)/w, ws.CPUPerMB().Seconds()/gw.CPUPerMB().Seconds())
		}
		if direct != nil {
			h3.Yardstick = fmt.Sprintf("websockify +%s ms p99 (+%s ms p50); under the load +%s ms p99",
				ms(ws.IdleRTTP99-direct.IdleRTTP99), ms(ws.IdleRTTP50-direct.IdleRTTP50), ms(ws.RTTP99-direct.RTTP99))
		}
	} else {
		h1.Yardstick, h2.Yardstick = "websockify missing: no yardstick", "websockify missing: no yardstick"
	}
	hs := []loadgen.Headline{h1, h2}
	if direct != nil {
		hs = append(hs, h3)
	}
	return hs
}
