package site

import "context"

// MachineSession returns a machine's runtime state and one of its
// sessions by ID, read (in an Update: locked) status first, in one round
// trip where the store can (Tx.MachineSessions). A missing machine or
// session is ENotFound.
func MachineSession(ctx context.Context, tx Tx, machine, id string) (MachineStatus, Session, error) {
	sts, sess, err := tx.MachineSessions(ctx, []string{machine}, []string{id})
	if err != nil {
		return MachineStatus{}, Session{}, err
	}
	st, ok := sts[machine]
	if !ok {
		return MachineStatus{}, Session{}, NotFound(KindMachine, machine)
	}
	s, ok := sess[id]
	if !ok {
		return MachineStatus{}, Session{}, NotFound(KindSession, id)
	}
	return st, s, nil
}
