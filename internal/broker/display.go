package broker

import (
	"context"

	"github.com/usher-vdi/usher/internal/site"
)

// DisplayTarget returns where the display of one of the user's live
// sessions is served: its machine's control URL and the certificate pin
// its VDA registered, as the broker's state has them (the site DB, or
// during a site-DB outage the Local Host Cache's copy, or the zone's
// leader when another broker leads). A gateway dials it; the client that
// asked never names the host. Token is left empty: the display is opened
// with the session's ticket, and the control token stays with the broker.
//
// Errors: ENotFound for a session that is not the user's, has ended, or
// does not exist, alike, so that IDs reveal nothing; EUnavailable when
// the session's machine is not registered (its VDA is away) or the site
// DB cannot be read.
func (b *Broker) DisplayTarget(ctx context.Context, user, id string) (Control, error) {
	if d := b.delegated(ctx); d != nil {
		return d.DisplayTarget(ctx, user, id)
	}
	var sess site.Session
	var st site.MachineStatus
	err := b.store.View(ctx, func(tx site.Tx) (err error) {
		if sess, err = tx.Sessions().Get(ctx, id); err != nil {
			return err
		}
		if sess.User != user || sess.State == site.SessionLoggedOff {
			return site.NotFound(site.KindSession, id)
		}
		st, err = tx.MachineStatus(ctx, sess.Machine)
		if site.ErrorCode(err) == site.ENotFound {
			st, err = site.MachineStatus{}, nil // never registered
		}
		return err
	})
	if site.ErrorCode(err) == site.ENotFound {
		return Control{}, site.NotFound(site.KindSession, id)
	}
	if err != nil {
		return Control{}, err
	}
	if st.Registration != site.Registered || st.ControlURL == "" {
		return Control{}, site.Errorf(site.EUnavailable, "the machine of session %q is not registered", id)
	}
	return Control{Machine: sess.Machine, URL: st.ControlURL, Pin: st.ControlPin}, nil
}
