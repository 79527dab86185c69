// Package memnet is an in-memory network for tests: listeners whose
// connections are net.Pipe pairs, and an HTTP transport that dials them.
//
// It exists for tests in a testing/synctest bubble. A goroutine blocked on a
// real socket is not durably blocked, so a bubble that serves HTTP over TCP
// never reaches quiescence and its fake clock never moves; one that serves
// over memnet does. Deadlines on the pipes run on the bubble's clock.
//
// Only tests import it.
package memnet
