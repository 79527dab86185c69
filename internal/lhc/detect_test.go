package lhc

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// TestDetectorTransitions walks the outage detector through probes, each a
// step at a time after the start, with OutageAfter 1 s (outage mode begins
// at 900 ms, enterAt) and RecoverAfter 1 s.
func TestDetectorTransitions(t *testing.T) {
	type step struct {
		at     time.Duration // since the start
		probe  probeOutcome
		forced bool
		// made, when set, tells the detector the move was made (entered
		// or left); a move not made leaves the mode as it was.
		made bool
		// want: the move, whether calls go to the site DB, and when
		// outage mode is due after the step (0: not due).
		move    move
		answers bool
		due     time.Duration
	}
	ms := time.Millisecond
	for _, tc := range []struct {
		name   string
		outage bool // starts in outage mode
		steps  []step
	}{
		{"answers: nothing happens", false, []step{
			{at: 100 * ms, probe: probeAnswered, move: moveStay, answers: true},
			{at: 5 * time.Second, probe: probeAnswered, move: moveStay, answers: true},
		}},
		{"one failed probe cuts calls off, and outage mode is due enterAt after the last answer", false, []step{
			{at: 100 * ms, probe: probeAnswered, answers: true},
			{at: 200 * ms, probe: probeFailed, move: moveStay, answers: false, due: 1000 * ms},
			{at: 300 * ms, probe: probeAnswered, move: moveStay, answers: true},
		}},
		{"no answer for enterAt: enter", false, []step{
			{at: 100 * ms, probe: probeAnswered, answers: true},
			{at: 500 * ms, probe: probeFailed, answers: false, due: 1000 * ms},
			{at: 999 * ms, probe: probeFailed, answers: false, due: 1000 * ms},
			{at: 1000 * ms, probe: probeFailed, move: moveEnter, answers: false, due: 1000 * ms, made: true},
			{at: 1100 * ms, probe: probeFailed, move: moveStay, answers: false},
		}},
		{"entering failed (no copy): the next failed probe enters again", false, []step{
			{at: 900 * ms, probe: probeFailed, move: moveEnter, due: 900 * ms},
			{at: 1000 * ms, probe: probeFailed, move: moveEnter, due: 900 * ms},
		}},
		{"at its connection limit the site DB answers: no outage, however long", false, []step{
			{at: 100 * ms, probe: probeBusy, move: moveStay, answers: true},
			{at: 2 * time.Second, probe: probeBusy, move: moveStay, answers: true},
			{at: 10 * time.Second, probe: probeBusy, move: moveStay, answers: true},
		}},
		{"a busy answer puts the deadline off", false, []step{
			{at: 800 * ms, probe: probeFailed, answers: false, due: 900 * ms},
			{at: 850 * ms, probe: probeBusy, answers: true},
			{at: 1500 * ms, probe: probeFailed, answers: false, due: 1750 * ms},
			{at: 1750 * ms, probe: probeFailed, move: moveEnter, answers: false, due: 1750 * ms},
		}},
		{"forced: enter at once, with the site DB answering, and stay while forced", false, []step{
			{at: 100 * ms, probe: probeAnswered, forced: true, move: moveEnter, answers: true, made: true},
			{at: 1500 * ms, probe: probeAnswered, forced: true, move: moveStay, answers: true},
			{at: 3 * time.Second, probe: probeAnswered, forced: true, move: moveStay, answers: true},
			{at: 3100 * ms, probe: probeAnswered, move: moveRecover, answers: true, made: true},
		}},
		{"recover once answered for RecoverAfter", true, []step{
			{at: 100 * ms, probe: probeFailed, move: moveStay},
			{at: 200 * ms, probe: probeAnswered, move: moveStay, answers: true},
			{at: 1100 * ms, probe: probeAnswered, move: moveStay, answers: true},
			{at: 1200 * ms, probe: probeAnswered, move: moveRecover, answers: true, made: true},
			{at: 1300 * ms, probe: probeAnswered, move: moveStay, answers: true},
		}},
		{"a flap starts RecoverAfter again", true, []step{
			{at: 100 * ms, probe: probeAnswered, answers: true},
			{at: 900 * ms, probe: probeFailed, move: moveStay},
			{at: 1200 * ms, probe: probeAnswered, move: moveStay, answers: true},
			{at: 2100 * ms, probe: probeAnswered, move: moveStay, answers: true},
			{at: 2200 * ms, probe: probeAnswered, move: moveRecover, answers: true},
		}},
		{"write-back failed: recover again at the next answer", true, []step{
			{at: 100 * ms, probe: probeAnswered, answers: true},
			{at: 1100 * ms, probe: probeAnswered, move: moveRecover, answers: true},
			{at: 1200 * ms, probe: probeAnswered, move: moveRecover, answers: true, made: true},
		}},
		{"busy answers in outage mode count towards RecoverAfter", true, []step{
			{at: 100 * ms, probe: probeBusy, answers: true},
			{at: 600 * ms, probe: probeAnswered, answers: true},
			{at: 1100 * ms, probe: probeBusy, move: moveRecover, answers: true},
		}},
		{"after recovery a cut is detected again", true, []step{
			{at: 100 * ms, probe: probeAnswered, answers: true},
			{at: 1100 * ms, probe: probeAnswered, move: moveRecover, answers: true, made: true},
			{at: 1200 * ms, probe: probeFailed, answers: false, due: 2000 * ms},
			{at: 2000 * ms, probe: probeFailed, move: moveEnter, due: 2000 * ms},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
			d := newDetector(time.Second, time.Second, start, tc.outage)
			for i, s := range tc.steps {
				got := d.observe(start.Add(s.at), s.probe, s.forced)
				if got.move != s.move || got.answers != s.answers {
					t.Fatalf("step %d (%v, %s, forced %v): %s, answers %v; want %s, answers %v", i, s.at, s.probe, s.forced,
						got.move, got.answers, s.move, s.answers)
				}
				if (got.move == moveStay) != (got.cause == "") {
					t.Errorf("step %d: %s with cause %q", i, got.move, got.cause)
				}
				if due, ok := d.due(); ok != (s.due != 0) || ok && due != start.Add(s.due) {
					t.Errorf("step %d: outage due %v (%v), want %v", i, due.Sub(start), ok, s.due)
				}
				if s.made {
					switch got.move {
					case moveEnter:
						d.entered()
					case moveRecover:
						d.left()
					}
				}
			}
		})
	}
}

// TestDetectorCountsBusyProbes: a probe refused for the site DB's
// connection limit is an answer, and counted.
func TestDetectorCountsBusyProbes(t *testing.T) {
	start := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	d := newDetector(time.Second, time.Second, start, false)
	for i := range 3 {
		if dec := d.observe(start.Add(time.Duration(i+1)*time.Second), probeBusy, false); dec.busyBegan != (i == 0) {
			t.Errorf("busy probe %d: busyBegan %v", i, dec.busyBegan)
		}
	}
	if d.busy != 3 || !d.answers || !d.last.Equal(start.Add(3*time.Second)) {
		t.Fatalf("after 3 busy probes: busy %d, answers %v, last %v", d.busy, d.answers, d.last.Sub(start))
	}
}

// TestOutcomeOf: how a probe's error is read.
func TestOutcomeOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want probeOutcome
	}{
		{nil, probeAnswered},
		{site.ErrConnLimit, probeBusy},
		{fmt.Errorf("open site DB: %w", site.ErrConnLimit), probeBusy},
		{errors.New("connection refused"), probeFailed},
		{site.Errorf(site.EUnavailable, "site DB cut off"), probeFailed},
	} {
		if got := outcomeOf(tc.err); got != tc.want {
			t.Errorf("outcomeOf(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}
