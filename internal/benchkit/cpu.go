package benchkit

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Plan is how a bench shares the machine's CPUs between the load
// generator and the servers under test.
type Plan struct {
	Client []int // CPUs the load generator is pinned to; nil: not pinned
	Server []int // CPUs the servers are pinned to; nil: not pinned
}

// PlanCPUs splits the CPUs this process may run on: the last one for the
// client, the others for the servers. With fewer than two CPUs nothing is
// pinned.
func PlanCPUs() Plan {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return Plan{}
	}
	var cpus []int
	for i := range len(set) * 64 {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	if len(cpus) < 2 {
		return Plan{}
	}
	return Plan{Client: cpus[len(cpus)-1:], Server: cpus[:len(cpus)-1]}
}

// Pinned reports whether the plan pins anything.
func (p Plan) Pinned() bool { return len(p.Client) > 0 }

// String describes the plan for a report.
func (p Plan) String() string {
	if !p.Pinned() {
		return "not pinned (one CPU)"
	}
	return fmt.Sprintf("client on CPU %s, servers on CPU %s", CPUList(p.Client), CPUList(p.Server))
}

// CPUList is cpus as taskset and messages write them: "1,2,3".
func CPUList(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

// PinServer pins every thread of this process (threads started later
// inherit it) to the plan's server CPUs and sets GOMAXPROCS to their
// number, the worker count a yardstick gets too (Workers). It returns a
// function that restores both. A plan that pins nothing changes nothing.
func (p Plan) PinServer() (restore func(), err error) {
	cpus := p.Server
	if len(cpus) == 0 {
		return func() {}, nil
	}
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, fmt.Errorf("pin: %w", err)
	}
	for _, c := range cpus {
		set.Set(c)
	}
	apply := func(s *unix.CPUSet) error {
		tids, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		for _, t := range tids {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			// A thread may have exited since the listing: ESRCH is fine.
			if err := unix.SchedSetaffinity(tid, s); err != nil && err != unix.ESRCH {
				return err
			}
		}
		return nil
	}
	if err := apply(&set); err != nil {
		apply(&old)
		return nil, fmt.Errorf("pin to CPU %s: %w", CPUList(cpus), err)
	}
	procs := runtime.GOMAXPROCS(len(cpus))
	return func() {
		runtime.GOMAXPROCS(procs)
		apply(&old)
	}, nil
}

// Usage is CPU time spent over a wall-clock interval.
type Usage struct {
	Wall, User, Sys time.Duration
}

// CPU is the time spent on a CPU, user and system.
func (u Usage) CPU() time.Duration { return u.User + u.Sys }

// Cores is the CPU time per wall-clock time: 1 is one core kept busy.
func (u Usage) Cores() float64 {
	if u.Wall <= 0 {
		return 0
	}
	return u.CPU().Seconds() / u.Wall.Seconds()
}

// Sub returns the usage between an earlier reading o and u.
func (u Usage) Sub(o Usage) Usage {
	return Usage{Wall: u.Wall - o.Wall, User: u.User - o.User, Sys: u.Sys - o.Sys}
}

// Meter reads cumulative CPU use; two readings give a Usage by Sub.
type Meter func() (Usage, error)

// epoch anchors the Wall of meter readings.
var epoch = time.Now()

// SelfCPU reads this process's CPU use: every thread, the bench's own
// idle orchestration included (a few milliseconds per second at most).
func SelfCPU() (Usage, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return Usage{}, fmt.Errorf("getrusage: %w", err)
	}
	return Usage{Wall: time.Since(epoch), User: tv(ru.Utime), Sys: tv(ru.Stime)}, nil
}

func tv(t syscall.Timeval) time.Duration {
	return time.Duration(t.Sec)*time.Second + time.Duration(t.Usec)*time.Microsecond
}

// TreeCPU returns a Meter of the CPU use of process pid and its
// descendants alive at each reading (an nginx master and its workers, an
// nbdkit and its threads), from /proc. Descendants that exit between two
// readings take their time with them: read around a steady run.
func TreeCPU(pid int) Meter { return treeCPU(pid, false) }

// TreeCPUReaped is TreeCPU with the time of the descendants that exited
// and were waited for (each process's cutime and cstime): the whole cost
// of a server that forks a process per connection (websockify), the
// children that served connections and ended included.
func TreeCPUReaped(pid int) Meter { return treeCPU(pid, true) }

func treeCPU(pid int, reaped bool) Meter {
	return func() (Usage, error) {
		now := time.Since(epoch)
		procs, err := readProcs()
		if err != nil {
			return Usage{}, err
		}
		if _, ok := procs[pid]; !ok {
			return Usage{}, fmt.Errorf("process %d is gone", pid)
		}
		children := map[int][]int{}
		for p, st := range procs {
			children[st.ppid] = append(children[st.ppid], p)
		}
		u := Usage{Wall: now}
		for todo := []int{pid}; len(todo) > 0; {
			p := todo[len(todo)-1]
			todo = todo[:len(todo)-1]
			st := procs[p]
			u.User += st.user
			u.Sys += st.sys
			if reaped {
				u.User += st.cuser
				u.Sys += st.csys
			}
			todo = append(todo, children[p]...)
		}
		return u, nil
	}
}

type procStat struct {
	ppid      int
	user, sys time.Duration
	// cuser and csys are the time of the process's children that it
	// waited for (cutime, cstime).
	cuser, csys time.Duration
}

// clockTick is USER_HZ, 100 on every Linux architecture Go supports
// (sysconf(_SC_CLK_TCK) needs cgo).
const clockTick = 100

func readProcs() (map[int]procStat, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("read /proc: %w", err)
	}
	procs := map[int]procStat{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone
		}
		st, err := parseStat(b)
		if err != nil {
			return nil, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		procs[pid] = st
	}
	return procs, nil
}

// parseStat reads ppid, utime and stime from a /proc/PID/stat line. The
// command name (field 2) may hold spaces and parentheses: the fields
// after it start after its last ')'.
func parseStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("no command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15,
	// cutime 16, cstime 17.
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("%d fields", len(f)+2)
	}
	ppid, err1 := strconv.Atoi(f[1])
	ut, err2 := strconv.ParseInt(f[11], 10, 64)
	st, err3 := strconv.ParseInt(f[12], 10, 64)
	cut, err4 := strconv.ParseInt(f[13], 10, 64)
	cst, err5 := strconv.ParseInt(f[14], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || err5 != nil {
		return procStat{}, fmt.Errorf("malformed fields")
	}
	tick := time.Second / clockTick
	return procStat{ppid: ppid, user: time.Duration(ut) * tick, sys: time.Duration(st) * tick,
		cuser: time.Duration(cut) * tick, csys: time.Duration(cst) * tick}, nil
}

// Workers returns the number of the plan's server CPUs, the runtime's
// GOMAXPROCS when it pins nothing: usher's threads running Go code during
// a pinned run, and so the worker count a yardstick gets.
func (p Plan) Workers() int {
	if len(p.Server) == 0 {
		return runtime.GOMAXPROCS(0)
	}
	return len(p.Server)
}
