package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-vdi/usher/internal/block/image"
	"github.com/usher-vdi/usher/internal/boot"
	"github.com/usher-vdi/usher/internal/boot/boothttp"
	"github.com/usher-vdi/usher/internal/boot/initramfs"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/tlsconf"
)

// bootWriteTimeout bounds the answer of one boot request: an initramfs
// of tens of MB to a target on a slow link.
const bootWriteTimeout = 5 * time.Minute

// checkBoot checks the boot server's part of a Config.
func (c Config) checkBoot() error {
	if c.BootListen == "" {
		if c.ImageStore != "" || c.BootStream != "" || c.BootAppend != "" || c.BootAgent != "" {
			return errors.New("server: the image store, the boot stream, the kernel arguments and the boot agent need a boot listener")
		}
		return nil
	}
	if c.ImageStore == "" || c.BootStream == "" {
		return errors.New("server: the boot listener needs the image store and the boot stream's address")
	}
	if _, err := boot.ParseStream(c.BootStream); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	if err := boot.CheckAppend(c.BootAppend); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	if _, _, err := c.bootAgent(); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	if !c.InsecureBootListen && !tlsconf.LoopbackAddr(c.BootListen) {
		return fmt.Errorf("server: boot listener %s is not a loopback address: anyone who reaches it gets the kernel and initramfs "+
			"of every target's image, and boots with no credential (firmware has none); allow it explicitly", c.BootListen)
	}
	return nil
}

// bootAgent returns the path of the boot agent (Config.BootAgent), or
// why there is none; an agent named that cannot be one is an error.
func (c Config) bootAgent() (path, noAgent string, err error) {
	switch c.BootAgent {
	case "none":
		return "", "usher serve was started with --boot-agent none", nil
	case "", "auto":
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Sprintf("this usher cannot find its own executable (%v); pass --boot-agent FILE", err), nil
		}
		if err := initramfs.CheckAgent(exe); err != nil {
			return "", fmt.Sprintf("this usher (%s) cannot run in an initramfs (%v); pass --boot-agent FILE, a usher built with CGO_ENABLED=0", exe, err), nil
		}
		return exe, "", nil
	}
	if err := initramfs.CheckAgent(c.BootAgent); err != nil {
		return "", "", err
	}
	return c.BootAgent, "", nil
}

// overlayOf returns what builds the device-side cache's initramfs
// overlay around the agent at path: once, kept; a failure (the file
// unreadable) is tried again at the next boot.
func overlayOf(path string) func() ([]byte, error) {
	var mu sync.Mutex
	var built []byte
	return func() ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		if built != nil {
			return built, nil
		}
		agent, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("boot agent: %w", err)
		}
		if built, err = initramfs.Overlay(agent, boot.DeviceListen); err != nil {
			return nil, err
		}
		return built, nil
	}
}

// startBoot serves network boot on ln: the targets of brk's snapshot,
// the image store of the Config, the boot log in store.
func (s *Server) startBoot(ctx context.Context, ln net.Listener, store site.Store, brk *broker.Broker, registry *prometheus.Registry) error {
	images, err := image.Open(s.cfg.ImageStore)
	if err != nil {
		return fmt.Errorf("boot: image store %s: %w", s.cfg.ImageStore, err)
	}
	images.Logger = s.log
	stream, _ := boot.ParseStream(s.cfg.BootStream) // checked by withDefaults
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "usher_boot_requests_total",
		Help: "Requests to the boot server, by step (chain, script, kernel, initrd, other) and outcome (served, bad_request, unknown_mac, refused, error, throttled: a source past its budget of MACs it is not served).",
	}, []string{"step", "outcome"})
	if err := registry.Register(requests); err != nil {
		return err
	}
	for _, step := range []string{boothttp.StepScript, boothttp.StepKernel, boothttp.StepInitrd} {
		for _, outcome := range []string{boothttp.OutcomeServed, boothttp.OutcomeUnknownMAC, boothttp.OutcomeRefused, boothttp.OutcomeThrottled} {
			requests.WithLabelValues(step, outcome) // every series from the start, at 0
		}
	}
	log := s.log.With("component", "boot")
	agent, noAgent, err := s.cfg.bootAgent()
	if err != nil {
		return fmt.Errorf("boot: %w", err)
	}
	var overlay func() ([]byte, error)
	if agent != "" {
		overlay = overlayOf(agent)
		log.Info("boot agent: ram and ram-overflow targets run it in their initramfs", "agent", agent)
	} else {
		log.Warn("no boot agent: ram and ram-overflow targets are refused", "reason", noAgent)
	}
	h, err := boothttp.New(boothttp.Config{
		Targets: func() (int64, []site.Target) {
			snap := brk.Snapshot()
			return snap.Version, snap.Config().Targets
		},
		Images:  boothttp.ImageStore(images),
		Store:   store,
		Script:  boot.ScriptOptions{Stream: stream, Append: s.cfg.BootAppend, NoAgent: noAgent},
		Overlay: overlay,
		Logger:  log,
		Count:   func(step, outcome string) { requests.WithLabelValues(step, outcome).Inc() },
	})
	if err != nil {
		return err
	}
	srv := s.fallbackServer(ctx, h)
	srv.ReadTimeout, srv.WriteTimeout = readHeaderTimeout, bootWriteTimeout
	srv.MaxHeaderBytes = 16 << 10
	srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	s.bootAddr = ln.Addr().String()
	log.Info("boot server listening", "addr", s.bootAddr, "image_store", s.cfg.ImageStore, "stream", s.cfg.BootStream)
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	s.cleanup = append(s.cleanup, func() {
		sctx, cancel := context.WithTimeout(context.Background(), nfuseShutdown)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			srv.Close()
		}
		<-done
	})
	return nil
}

// BootAddr is the boot listener's address, "" without one.
func (s *Server) BootAddr() string { return s.bootAddr }

var _ http.Handler = (*boothttp.Handler)(nil)
