package broker

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// Operations of the broker's transactions, as an Observer sees them.
const (
	OpEnumerate = "enumerate"
	OpLaunch    = "launch"
	OpReconnect = "reconnect"
	OpLogin     = "login"
	OpRegister  = "register"
)

// Operations lists every operation, so that metrics can show each one
// (at 0) before its first transaction.
var Operations = []string{OpEnumerate, OpLaunch, OpReconnect, OpLogin, OpRegister}

// Observer is told about the broker's transactions, for metrics. The
// broker calls it from every transaction concurrently, so its methods must
// be safe for concurrent use and return quickly; nothing they do changes
// the transaction. A nil Config.Observer observes nothing.
type Observer interface {
	// TransactionStarted is called when a transaction of op starts, and
	// TransactionFinished with the same op when it ends, just before
	// TransactionDone.
	TransactionStarted(op string)
	TransactionFinished(op string)
	// TransactionDone records a completed transaction: the operation it
	// counts as (a launch that returned the user to an existing session
	// counts as OpReconnect), how long it took, and its error, nil on
	// success. Transactions that a transport measured itself (a login)
	// reach it without TransactionStarted.
	TransactionDone(op string, d time.Duration, err error)
	// Refused records a transaction that Admit refused at once with
	// ErrOverloaded.
	Refused()
	// Reconnected records a launch that returned a user to an existing
	// session.
	Reconnected()
	// TimerLogoff records a session logged off by its delivery group's
	// session timer, named as in site files: TimerDisconnectedLogoff or
	// TimerMaxSession.
	TimerLogoff(timer string)
}

// nopObserver observes nothing.
type nopObserver struct{}

func (nopObserver) TransactionStarted(string)                    {}
func (nopObserver) TransactionFinished(string)                   {}
func (nopObserver) TransactionDone(string, time.Duration, error) {}
func (nopObserver) Refused()                                     {}
func (nopObserver) Reconnected()                                 {}
func (nopObserver) TimerLogoff(string)                           {}

// begin tells the observer a transaction started; the returned function
// ends it with its outcome.
func (b *Broker) begin(op string) func(error) {
	return b.beginAs(op, func() string { return op })
}

// beginAs is begin whose final operation is decided at the end (a launch
// that reconnected counts as a reconnect).
func (b *Broker) beginAs(op string, final func() string) func(error) {
	start := time.Now()
	b.obs.TransactionStarted(op)
	return func(err error) {
		b.obs.TransactionFinished(op)
		b.obs.TransactionDone(final(), time.Since(start), err)
	}
}

// Begin tells the observer that a transaction of op that a transport runs
// itself (a login) started; the returned function ends it with its
// outcome.
func (b *Broker) Begin(op string) func(error) { return b.begin(op) }

// Observe records a transaction of op that a transport measured itself,
// started at start and ended now with err, without counting it among the
// transactions in flight (Begin does).
func (b *Broker) Observe(op string, start time.Time, err error) {
	b.obs.TransactionDone(op, time.Since(start), err)
}

// MachineLoad is a machine's registration and load as the broker sees it.
type MachineLoad struct {
	Name, DeliveryGroup     string
	Registered, Maintenance bool
	LoadIndex               int
	// Sessions counts the machine's sessions, pending ones and ones being
	// placed included.
	Sessions int
}

// MachineLoads returns every configured machine's registration and load,
// in name order, from memory.
func (b *Broker) MachineLoads() []MachineLoad {
	states := b.machines.snapshot()
	out := make([]MachineLoad, 0, len(states))
	for _, ms := range states {
		out = append(out, MachineLoad{Name: ms.name, DeliveryGroup: ms.group, Registered: ms.registered,
			Maintenance: ms.maintenance, LoadIndex: ms.load.Index, Sessions: ms.effective().Sessions})
	}
	slices.SortFunc(out, func(a, b MachineLoad) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// SessionCounts returns how many sessions the site DB holds in each live
// state: pending, active and disconnected. On an error it returns the
// states counted before it, with the error.
func (b *Broker) SessionCounts(ctx context.Context) (map[site.SessionState]int, error) {
	counts := map[site.SessionState]int{}
	err := b.store.View(ctx, func(tx site.Tx) error {
		for _, st := range []site.SessionState{site.SessionPending, site.SessionActive, site.SessionDisconnected} {
			p, err := tx.Sessions().List(ctx, site.SessionFilter{State: st}, site.ListOptions{Limit: 1})
			if err != nil {
				return err
			}
			counts[st] = p.Total
		}
		return nil
	})
	return counts, err
}
