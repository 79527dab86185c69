// Package bench runs the seed experiments end to end against an usher
// site on one machine and reports usher's figures beside the published
// ones (docs/published-results.md):
//
//   - Launch: the zones-and-latency test, launches through the REST API at fixed concurrency
//     onto 57 simulated VDAs of one delivery group;
//   - LaunchOverLatency: the same with the site DB on PostgreSQL across a
//     WAN of each RTT, simulated by the latency injector internal/wan
//     (toxiproxy run in process; WAN), with
//     the site DB's round trips counted on the wire (DBTap);
//   - LogonStorm: users logging on and launching at a fixed arrival rate
//     (Citrix's 20/s sizing test), and the highest rate held with bounded
//     latency;
//   - DirectoryLogonStorm: logons of an LDAP directory's users (slapd
//     started for the run by internal/dirserver), cold and warm, beside the
//     site's own users, with the directory's operations per logon;
//   - Enumerate: the LHC and IMA/FMA enumeration tests, 400 applications enumerated over NFuse
//     at stepped concurrency, beside nginx serving the same bytes;
//   - Boot: seed 001 on real boots, VMs under QEMU (internal/vmrun)
//     booting one image at once through each write-cache mode, with every
//     layer's I/O counted (usher's meters, QEMU's block counters, the
//     disk's diskstats) beside the booting of the same image from a local
//     file.
//
// The package builds the bench site and drives the load with
// internal/loadgen; starting the site is the caller's (cmd/usher starts an
// internal/server site), through a StartFunc. It only ever loads the URL
// of the site it was given. It imports the domain (site, demo, auth) and
// loadgen, and the runners its experiments start, never a test helper:
// for the WAN experiment pgadmin (a schema per run), pgstore (its pool
// size) and the latency injector internal/wan (toxiproxy), for the LHC
// cuts internal/pgcluster (a throwaway cluster to crash), for the
// directory storm the directory server internal/dirserver and ldapauth
// (its operations' names), and for the boot experiment the VM runner
// internal/vmrun and blockbench (disk counters, seed 001's table); only
// cmd/usher and tests import it.
package bench
