// Package benchkit is what every bench that sets usher beside a yardstick
// shares, so that its figures say something about the servers and not
// about the load generator:
//
//   - the load generator runs in another process, pinned to CPUs of its
//     own when the machine has more than one (Plan, Command), and its CPU
//     use is measured (Run, Usage);
//   - the servers' CPU use is measured too, in this process (SelfCPU) or
//     in a child process tree (TreeCPU), so that a bench can report CPU per
//     operation where a throughput ratio would say nothing;
//   - the client's ceiling is calibrated in the same run against a server
//     that does no work, and a figure near that ceiling is client-bound and
//     gets no ratio (Compare);
//   - the servers a bench starts (nbdkit, usher) are started, waited
//     for, stopped and killed one way (StartProc, Proc), on ports found one
//     way (FreePort, FreeAddr), and their /metrics are read one way
//     (Scrape, ParseMetrics).
//
// Only the benches and their commands import it.
package benchkit
