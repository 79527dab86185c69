package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of a display, as usher_gateway_displays_total counts them.
const (
	// outcomeRefused: refused before the upgrade (not a WebSocket, wrong
	// origin, no portal session, no ticket, not the user's session).
	outcomeRefused = "refused"
	// outcomeUnavailable: the session's machine could not be told (not
	// registered, the site DB down).
	outcomeUnavailable = "unavailable"
	// outcomeOverLimit: over the bounds of displays open at once.
	outcomeOverLimit = "over_limit"
	// outcomeUnreachable: the agent could not be opened.
	outcomeUnreachable = "agent_unreachable"
	// outcomeClosed: spliced, and ended by a close of either side.
	outcomeClosed = "closed"
	// outcomeLost: spliced, and ended as a side's connection failed or
	// stopped answering pings.
	outcomeLost = "lost"
	// outcomeShutdown: ended by the gateway's Close.
	outcomeShutdown = "shutdown"
)

var outcomes = []string{outcomeRefused, outcomeUnavailable, outcomeOverLimit, outcomeUnreachable, outcomeClosed, outcomeLost, outcomeShutdown}

// Directions of bytes, and sides pinged.
const (
	toAgent   = "to_agent"
	toBrowser = "to_browser"
)

// side is one end of a display.
type side string

const (
	sideBrowser side = "browser"
	sideAgent   side = "agent"
)

// metrics are the gateway's Prometheus metrics:
//
//	usher_gateway_displays_open                      displays spliced now
//	usher_gateway_displays_total{outcome}            displays asked for, by outcome
//	usher_gateway_bytes_total{direction}             message bytes forwarded, to_agent and to_browser
//	usher_gateway_ping_rtt_seconds{side}             ping round trips, to the browser and to the agent
//	usher_gateway_agent_dial_failures_total          agents that could not be opened
type metrics struct {
	open         prometheus.Gauge
	sessions     *prometheus.CounterVec
	bytes        map[string]prometheus.Counter
	rtt          map[side]prometheus.Observer
	dialFailures prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		open: prometheus.NewGauge(prometheus.GaugeOpts{Name: "usher_gateway_displays_open",
			Help: "Displays the gateway splices now."}),
		sessions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "usher_gateway_displays_total",
			Help: "Displays asked of the gateway, by outcome: refused, unavailable, over_limit, agent_unreachable (before a splice); closed, lost, shutdown (how a splice ended)."},
			[]string{"outcome"}),
		dialFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "usher_gateway_agent_dial_failures_total",
			Help: "Agents the gateway could not open a display at: unreachable, refusing the ticket, or showing another certificate."}),
	}
	bytes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "usher_gateway_bytes_total",
		Help: "Message bytes the gateway forwarded, by direction."}, []string{"direction"})
	rtt := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "usher_gateway_ping_rtt_seconds",
		Help:    "Round-trip times of the gateway's pings, by side.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, []string{"side"})
	for _, o := range outcomes {
		m.sessions.WithLabelValues(o)
	}
	m.bytes = map[string]prometheus.Counter{toAgent: bytes.WithLabelValues(toAgent), toBrowser: bytes.WithLabelValues(toBrowser)}
	m.rtt = map[side]prometheus.Observer{sideBrowser: rtt.WithLabelValues(string(sideBrowser)), sideAgent: rtt.WithLabelValues(string(sideAgent))}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.open, m.sessions, bytes, rtt, m.dialFailures} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
