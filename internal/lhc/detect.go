package lhc

import (
	"errors"
	"fmt"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// probeOutcome is what one probe of the site DB found.
type probeOutcome int

const (
	// probeAnswered: the site DB answered with its configuration version.
	probeAnswered probeOutcome = iota
	// probeBusy: the site DB refused the probe's connection because it is
	// at its connection limit (site.ErrConnLimit). It answers: that is no
	// outage, and calls to it go on (they wait for its pool).
	probeBusy
	// probeFailed: no answer (an error, a timeout, or the deadline of
	// OutageAfter since the last answer passing before the probe ended).
	probeFailed
)

func (o probeOutcome) String() string {
	switch o {
	case probeAnswered:
		return "answered"
	case probeBusy:
		return "busy"
	}
	return "failed"
}

// outcomeOf classifies a probe's error: nil is an answer, an error that is
// site.ErrConnLimit a busy answer, any other a failure.
func outcomeOf(err error) probeOutcome {
	switch {
	case err == nil:
		return probeAnswered
	case errors.Is(err, site.ErrConnLimit):
		return probeBusy
	}
	return probeFailed
}

// move is what the Store must do after a probe.
type move int

const (
	moveStay    move = iota // nothing changes mode
	moveEnter               // enter outage mode
	moveRecover             // write the outage back and return to the site DB
)

func (m move) String() string {
	return [...]string{"stay", "enter", "recover"}[m]
}

// decision is the detector's answer to one probe.
type decision struct {
	move  move
	cause string // why, for moveEnter and moveRecover
	// answers tells whether calls may go to the site DB (false: they are
	// cut off and fail at once); changed, whether that changed with this
	// probe, and busyBegan, whether this probe was the first answered
	// busy after others were not, for the log.
	answers, changed, busyBegan bool
}

// detector decides, from the outcomes of the site DB's probes, when a
// Store enters outage mode and when it leaves it. It does no I/O and has
// no clock of its own: every input comes with its time. The Store feeds
// it under its mu and tells it when a move was made (entered, left),
// since entering or recovering can fail; Force's moves go through those
// too.
//
// The rules: an answer (or a busy answer) makes the site DB answering;
// outage mode is due once enterAt has passed since the last answer with
// none since, or at once when forced; in outage mode, the site DB having
// answered every probe for RecoverAfter, and the outage not forced, the
// Store recovers.
type detector struct {
	outageAfter, recoverAfter time.Duration

	outage bool // the Store is in outage mode
	// answers is whether the last probe was answered; last, when the
	// site DB last answered.
	answers bool
	last    time.Time
	// okSince is when the site DB began answering again in outage mode
	// (zero outside outage mode, and after a failed probe).
	okSince time.Time
	// busy counts the probes answered busy (site.ErrConnLimit); wasBusy
	// tells whether the last probe was.
	busy    int64
	wasBusy bool
}

// newDetector returns a detector of a Store that starts at now, in outage
// mode or answering.
func newDetector(outageAfter, recoverAfter time.Duration, now time.Time, outage bool) *detector {
	d := &detector{outageAfter: outageAfter, recoverAfter: recoverAfter, outage: outage}
	if !outage {
		d.answers, d.last = true, now
	}
	return d
}

// enterAt is how long after the site DB's last answer the Store begins
// to enter outage mode: a little before OutageAfter, as entering takes
// tens of milliseconds (opening the copy, seeding it, the calls under
// way ending), so that brokering from the copy has begun once OutageAfter
// has passed.
func (d *detector) enterAt() time.Duration {
	return d.outageAfter - min(enterAhead, d.outageAfter/10)
}

// observe takes a probe's outcome at now, forced telling whether an admin
// forces outage mode, and says what to do.
func (d *detector) observe(now time.Time, o probeOutcome, forced bool) decision {
	answered := o != probeFailed
	if o == probeBusy {
		d.busy++
	}
	dec := decision{answers: answered, changed: answered != d.answers, busyBegan: o == probeBusy && !d.wasBusy}
	d.wasBusy = o == probeBusy
	d.answers = answered
	if answered {
		d.last = now
	}
	switch {
	case !answered || !d.outage:
		d.okSince = time.Time{}
	case d.okSince.IsZero():
		d.okSince = now
	}
	switch {
	case !d.outage && forced:
		dec.move, dec.cause = moveEnter, "forced by an admin"
	case !d.outage && !answered && now.Sub(d.last) >= d.enterAt():
		dec.move, dec.cause = moveEnter, fmt.Sprintf("the site DB has not answered for %s", now.Sub(d.last).Round(time.Millisecond))
	case d.outage && answered && !forced && now.Sub(d.okSince) >= d.recoverAfter:
		dec.move, dec.cause = moveRecover, fmt.Sprintf("the site DB has answered for %s", now.Sub(d.okSince).Round(time.Millisecond))
	}
	return dec
}

// due returns when outage mode is due, on the detector's clock, if the
// site DB does not answer and the Store is not in outage mode: a probe
// failing then (or no answer by then) enters it.
func (d *detector) due() (time.Time, bool) {
	if d.outage || d.answers {
		return time.Time{}, false
	}
	return d.last.Add(d.enterAt()), true
}

// entered records that the Store entered outage mode.
func (d *detector) entered() { d.outage, d.okSince = true, time.Time{} }

// left records that the Store returned to the site DB.
func (d *detector) left() { d.outage, d.okSince = false, time.Time{} }
