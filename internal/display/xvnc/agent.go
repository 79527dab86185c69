package xvnc

import (
	"context"

	"github.com/usher-vdi/usher/internal/vda"
)

var (
	_ vda.DisplayStarter = (*Starter)(nil)
	_ vda.Display        = (*Display)(nil)
)

// StartDisplay is Start for the agent: the Starter is the
// vda.DisplayStarter of a machine (MachineConfig.Display) that runs
// usher vda --display xvnc, or the demo's desktop host.
func (st *Starter) StartDisplay(ctx context.Context, s vda.Session) (vda.Display, error) {
	d, err := st.Start(ctx, Session{ID: s.ID, User: s.User, Resource: s.Resource, CommandLine: s.CommandLine})
	if err != nil {
		return nil, err
	}
	return d, nil
}
