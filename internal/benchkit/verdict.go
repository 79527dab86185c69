package benchkit

import (
	"fmt"
	"strconv"
)

// ClientBound is the share of the client's ceiling at which a server's
// throughput says more about the client than about the server.
const ClientBound = 0.9

// Headroom is how far above both servers the client's ceiling must be
// for an I/O ratio to be printed: a client that can do 1.5 × the faster
// server's rate is not what limits either.
const Headroom = 1.5

// Step is one server's figure at one load level, with what the client
// cost and could do.
type Step struct {
	Rate    float64 // operations per second
	Ceiling float64 // the client's rate against a server that does no work, same level; 0: not calibrated
	Client  Usage   // the load generator's CPU over the step
	Server  Usage   // the server's CPU over the step; zero: not measured
}

// Bound reports whether the step ran at the client's ceiling (at least
// ClientBound of it). An uncalibrated step is not known to be bound.
func (s Step) Bound() bool { return s.Ceiling > 0 && s.Rate >= ClientBound*s.Ceiling }

// CPUPerOp is the server's CPU time per operation, 0 when not measured.
func (s Step) CPUPerOp() float64 {
	if s.Rate <= 0 || s.Server.Wall <= 0 {
		return 0
	}
	return s.Server.CPU().Seconds() / (s.Rate * s.Server.Wall.Seconds())
}

// Compare returns usher's rate over the yardstick's, formatted, or why
// there is none: "client-bound" (and whose) when either ran at the
// client's ceiling, "-" when the yardstick did nothing. need is the
// headroom the ceiling must have over both (1 for the ClientBound rule
// alone, Headroom for I/O tests).
func Compare(usher, yard Step, need float64) string {
	ceil := max(usher.Ceiling, yard.Ceiling)
	if ceil > 0 && need > 1 && ceil < need*max(usher.Rate, yard.Rate) {
		return fmt.Sprintf("client-bound (ceiling < %.1f×)", need)
	}
	switch ub, yb := usher.Bound(), yard.Bound(); {
	case ub && yb:
		return "client-bound"
	case ub:
		return "client-bound (usher)"
	case yb:
		return "client-bound (yardstick)"
	}
	if yard.Rate <= 0 {
		return "-"
	}
	return strconv.FormatFloat(usher.Rate/yard.Rate, 'f', 2, 64)
}

// Ratio reports whether Compare's answer is a ratio.
func Ratio(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

// Percent formats a share of the client's ceiling, "-" when uncalibrated.
func (s Step) Percent() string {
	if s.Ceiling <= 0 {
		return "-"
	}
	return strconv.FormatFloat(100*s.Rate/s.Ceiling, 'f', 0, 64) + "%"
}
