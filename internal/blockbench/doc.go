// Package blockbench holds usher's image-streaming experiments, which
// `usher bench` runs and internal/bench reuses (its disk statistics,
// DiskOf, and the published figures, Seed001):
//
//   - the write-cache experiment of the PVS RAM-cache paper (`usher bench
//     writecache`): measured by default (RunMeasured: fio jobs, one NBD
//     connection per target, through each write-cache mode into real
//     files, the operations counted at the client, at the caches, at their
//     files and on the disk), or with --model the replay described below
//     (RunWritecache);
//   - the NBD server comparison against nbdkit (`usher bench nbd`, RunNBD);
//   - the host-cache experiment (`usher bench hostcache`, RunHostcache),
//     which starts usher stream and usher hostcache in their own processes
//     and drives them with the VM load generator (RunVMs).
//
// Only cmd/usher and internal/bench import it; it imports the block
// layers, block/imageexport, block/hostexport and benchkit.
//
// # The write-cache modes
//
// N targets (default 8) boot one image and then work, each through its
// own write cache, in every PVS write-cache mode:
//
//	server-disk          a sparse overlay on the stream server's disk (usher stream --write-cache)
//	device-ram           device RAM with a fixed budget that holds the working set (usher target --cache ram)
//	ram-overflow         device RAM with overflow, budget holds the working set (--cache ram-overflow)
//	ram-overflow-small   device RAM with overflow, budget a quarter of the working set
//	device-disk          a sparse overlay on the device's disk (usher target --cache disk)
//
// The layers are the real ones (the image store served by imageexport.Images,
// its meters and server RAM cache, then a writecache layer), but the
// write cache over each export is built here (newTarget), not by the code
// of usher target: the overlays are opened with writecache.OpenOverlay,
// without the options and the upstream identity check that usher target
// gives writecache.OpenOverlayWith, and the device modes see the export
// read-only, in process, without the NBD hop between them (the `nbd`
// experiment measures that hop). The operations that reach disk are those
// the meter counts on the write cache's own file: the overlay file
// (writecache.Overlay.Disk) or the overflow file. Image-store reads are
// reported apart: they are shared by every target and absorbed by the
// server RAM cache.
//
// # The modelled workload (--model), at full scale (per target)
//
// Derived from the reference figures (block-streaming.md, the PVS RAM-cache paper):
//
//   - Boot: 70,000 reads, "mostly small random I/Os": 90% 4 KiB, 6%
//     8 KiB, 2% 16 KiB, 2% 64 KiB (5.7 KiB average, so about 400 MB,
//     inside the quoted 150-600 MB), uniformly random, aligned, over a
//     320 MiB boot set shared by every target. Interleaved with them,
//     25 MB of writes (the quoted 20-30 MB): 60% 4 KiB, 20% 8 KiB,
//     10% 16 KiB, 10% 64 KiB, random in the 64 MiB hot region (page
//     file, registry, logs, temp). A boot lasts 60 s; the N boots start
//     evenly over 5 minutes (the PVS RAM-cache paper's staged boots; PVS booted 500
//     targets in 5 minutes).
//   - Steady state, from each target's boot end until 65 minutes after
//     the first boot (an hour of Login VSI "medium" work): 10 IOPS per
//     target (the PVS RAM-cache paper's disk-cache 95th percentile is 7,455 and 4,968
//     IOPS for 500 XenDesktop users, 15 and 10 per user, boots
//     included), 90% writes ("steady-state write caches see about 90%
//     writes"). Writes are 70% 4 KiB, 15% 8 KiB, 10% 16 KiB, 5% 64 KiB;
//     80% of them land at random in the hot region (rewrites) and 20%
//     append fresh data (profile, logs, caches). Reads are half of
//     written hot blocks, half of the image's boot set.
//   - The write working set is then about 64 MiB + 20% of ~285 MB ≈
//     120 MiB. RAM budgets: 256 MiB holds it (PVS's sizing for desktop
//     images, and the IntelliCache paper's MCS cache of 256 MB); 32 MiB does not.
//     The server RAM cache is 1 GiB; the image 4 GiB (sparse outside the
//     boot set).
//
// # Scale
//
// Every size, operation count and duration is divided by Scale (default
// 2: a default run of 8 targets takes about 20 s of wall time here and a
// few hundred MB of scratch disk; --scale 1, the full-scale workload,
// about 30 s and 2 GB); I/O sizes are kept, so rates (IOPS per target) and
// ratios (working set to budget, writes to disk operations) are those of
// the full-scale workload. The run is a replay as fast as the layers
// go, on a virtual clock: each operation carries its (scaled) time, and
// the disk operations it causes are counted in the window (30 s full
// scale) it falls in, so per-target IOPS and their 95th percentile over
// windows are in full-scale units, comparable to the PVS RAM-cache paper's.
package blockbench
