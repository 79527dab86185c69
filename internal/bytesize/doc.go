// Package bytesize is usher's one grammar for sizes in bytes, as flags
// and configuration take them (usher stream --ram-cache, usher target
// --ram and --overflow-size, usher bench nbd --size and --ram-cache,
// usher serve --send-buffer): a number with an optional unit, where SI
// units (kB, MB, GB) are powers of 1000 and IEC units (KiB, MiB, GiB)
// powers of 1024, as the units themselves say. Parsing is go-humanize's
// ParseBytes, with usher's limits and error message around it.
//
// Any package may import bytesize; it imports nothing of usher, only
// github.com/dustin/go-humanize.
package bytesize
