package api

import (
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// EnrolmentTokenResponse is a new single-use machine enrolment token. It
// is shown once.
type EnrolmentTokenResponse struct {
	Machine   string    `json:"machine"`
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

func (s *Server) registerMachineCredentials() {
	item := adminPrefix + "/machines/{name}"
	s.route(Route{Method: "GET", Pattern: item + "/credential", OperationID: "getMachineCredential", Tag: "machines",
		Summary:  "What the site keeps of a machine's credential: when it was issued, whether the machine is bound to machine enrolment tokens",
		Response: reflect.TypeFor[site.MachineCredential]()}, s.getMachineCredential)
	s.route(Route{Method: "POST", Pattern: item + "/revoke-credential", OperationID: "revokeMachineCredential", Tag: "machines",
		Summary: "Revoke a machine's credential, and any waiting enrolment token: its VDA is refused until it enrols again",
		Status:  http.StatusNoContent}, s.revokeMachineCredential)
	s.route(Route{Method: "POST", Pattern: item + "/enrolment-token", OperationID: "createMachineEnrolmentToken", Tag: "machines",
		Summary: "Create a single-use enrolment token for a machine (usher vda --enrolment-token) and bind the machine to such tokens: " +
			"the site's enrolment secret no longer enrols it",
		Query:    []QueryParam{{Name: "ttl_seconds", Description: "How long the token waits for its VDA (default a day).", Integer: true}},
		Response: reflect.TypeFor[EnrolmentTokenResponse](), Status: http.StatusCreated}, s.createEnrolmentToken)
}

func (s *Server) getMachineCredential(r *http.Request) (any, error) {
	var c site.MachineCredential
	err := s.cfg.Store.View(r.Context(), func(tx site.Tx) (err error) {
		c, err = tx.MachineCredential(r.Context(), r.PathValue("name"))
		return err
	})
	return c, err
}

func (s *Server) revokeMachineCredential(r *http.Request) (any, error) {
	name := r.PathValue("name")
	err := s.cfg.Store.Update(r.Context(), func(tx site.Tx) error { return site.RevokeMachineCredential(r.Context(), tx, name) })
	s.credentials.forget(name)
	if err == nil {
		s.log.WarnContext(r.Context(), "machine credential revoked", "machine", name, "admin", adminFrom(r.Context()))
	}
	return nil, err
}

func (s *Server) createEnrolmentToken(r *http.Request) (any, error) {
	name := r.PathValue("name")
	ttl := site.DefaultEnrolmentTokenTTL
	if v := r.URL.Query().Get("ttl_seconds"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 30*24*3600 {
			return nil, site.Errorf(site.EInvalid, "ttl_seconds %q is not a number from 1 to %d", v, 30*24*3600)
		}
		ttl = time.Duration(n) * time.Second
	}
	out := EnrolmentTokenResponse{Machine: name}
	err := s.cfg.Store.Update(r.Context(), func(tx site.Tx) (err error) {
		out.Token, out.ExpiresAt, err = site.NewMachineEnrolmentToken(r.Context(), tx, name, time.Now(), ttl)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(r.Context(), "machine enrolment token created; the machine is bound to such tokens", "machine", name,
		"expires_at", out.ExpiresAt, "admin", adminFrom(r.Context()))
	return out, nil
}

// deleteMachine deletes a machine, through the broker when there is one,
// so that ?force=true can end its sessions.
func deleteMachine(s *Server, r *http.Request, name string) error {
	force := false
	if v := r.URL.Query().Get("force"); v != "" {
		var err error
		if force, err = strconv.ParseBool(v); err != nil {
			return site.Errorf(site.EInvalid, "force %q is not true or false", v)
		}
	}
	if s.cfg.Broker != nil {
		return s.cfg.Broker.DeleteMachine(r.Context(), name, force, adminActor(r.Context()))
	}
	if force {
		return site.Errorf(site.EInvalid, "force needs a broker to end the sessions")
	}
	return s.mutate(r.Context(), func(c *site.Config) error {
		n := len(c.Machines)
		c.Machines = slices.DeleteFunc(c.Machines, func(m site.Machine) bool { return m.Name == name })
		if len(c.Machines) == n {
			return site.NotFound(site.KindMachine, name)
		}
		return nil
	}, nil)
}
