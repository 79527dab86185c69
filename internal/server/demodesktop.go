package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os/user"
	"slices"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/display/xvnc"
	"github.com/usher-vdi/usher/internal/vda"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// DemoDesktopHint says how to get the demo's desktop when Xvnc is missing.
const DemoDesktopHint = "for a real desktop in the browser, install Xvnc (apt-get install tigervnc-standalone-server) and start again"

// DemoDesktop is what the demo's desktop host runs, for the banner.
type DemoDesktop struct {
	// Resource is the desktop to open, as a user of its group (User)
	// sees it; Machines are the machines the host serves, nil when it
	// runs none.
	Resource string
	User     string
	Machines []string
	// Missing says why there is no desktop host and how to get one, ""
	// when there is one or none was asked for.
	Missing string
}

// demoDesktop is the demo's desktop host: one in-process VDA agent per
// machine of demo.DesktopGroup, each on a loopback control listener of
// its own, registering through the site's VDA API as any agent does,
// with one Xvnc per session (run as Config.DemoDesktopAccount).
type demoDesktop struct {
	info     DemoDesktop
	machines []*vda.Machine
	stop     context.CancelFunc
	wg       sync.WaitGroup
}

// startDemoDesktop starts the demo's desktop host, as Config.DemoDesktop
// asks, once the site serves. Without Xvnc it starts nothing and says so
// in s.desktop.info.Missing.
func (s *Server) startDemoDesktop(ctx context.Context) error {
	d := &demoDesktop{info: DemoDesktop{Resource: demo.DesktopResource, User: demo.DesktopUser}}
	s.desktop = d
	var names []string
	for _, m := range s.broker.Snapshot().MachinesOf(demo.DesktopGroup) {
		names = append(names, m.Name)
	}
	slices.Sort(names)
	if len(names) == 0 {
		d.info.Missing = fmt.Sprintf("the site has no machines in delivery group %q for a desktop host (--demo-reset reloads the demo site)", demo.DesktopGroup)
		return nil
	}
	me, err := user.Current()
	if err != nil {
		return fmt.Errorf("demo desktop: this process's account: %w", err)
	}
	log := s.log.With("role", "demo-desktop")
	account := s.cfg.DemoDesktopAccount
	if account == "" {
		account = me.Username
		if me.Uid == "0" {
			// The demo's users share one printed password: their desktop
			// is no root shell.
			account = "nobody"
		}
	}
	st, err := xvnc.New(xvnc.Config{Account: account, DesktopCommand: cmp.Or(s.cfg.DemoDesktopCommand, demo.DesktopCommand),
		Logger: log})
	if errors.Is(err, xvnc.ErrNotInstalled) {
		d.info.Missing = DemoDesktopHint
		log.Info("no Xvnc: the demo's desktop machines are simulated", "hint", DemoDesktopHint)
		return nil
	}
	if err != nil {
		return fmt.Errorf("demo desktop: %w", err)
	}
	client, err := vda.NewClient(vda.ClientConfig{BrokerURL: s.URL(), HTTPClient: s.simClient(len(names)), Logger: log})
	if err != nil {
		return fmt.Errorf("demo desktop: %w", err)
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	d.stop = stop
	for _, name := range names {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			d.close()
			return fmt.Errorf("demo desktop %s: %w", name, err)
		}
		m, err := vda.NewMachine(vda.MachineConfig{Name: name, Client: client, Secret: s.secret, ControlURL: "http://" + ln.Addr().String(),
			Protocol: vdaproto.ProtocolVNC, Display: st, Logger: log})
		if err != nil {
			ln.Close()
			d.close()
			return fmt.Errorf("demo desktop %s: %w", name, err)
		}
		d.machines = append(d.machines, m)
		d.wg.Go(func() {
			if err := vda.RunAgent(runCtx, m, ln); err != nil && runCtx.Err() == nil {
				log.Error("the demo desktop's agent stopped", "machine", name, "err", err)
			}
		})
	}
	d.info.Machines = names
	log.Info("demo desktop host started", "resource", demo.DesktopResource, "machines", len(names), "account", account)
	return nil
}

// close stops the agents, and with them their sessions' displays.
func (d *demoDesktop) close() {
	if d.stop != nil {
		d.stop()
	}
	d.wg.Wait()
}

// DemoDesktop says what the demo's desktop host runs (its zero value
// without Config.DemoDesktop).
func (s *Server) DemoDesktop() DemoDesktop {
	if s.desktop == nil {
		return DemoDesktop{}
	}
	return s.desktop.info
}

// WaitDemoDesktop waits until every machine of the demo's desktop host
// has registered, or limit passes, and reports whether they have. It
// returns true at once when the host runs none.
func (s *Server) WaitDemoDesktop(ctx context.Context, limit time.Duration) bool {
	if s.desktop == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		all := true
		for _, m := range s.desktop.machines {
			all = all && m.Registered()
		}
		if all {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}
