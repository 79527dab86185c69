//go:build race

package api_test

// raceEnabled: under the race detector a site of sitegen.LargeSize takes
// minutes to build, so the benchmarks that build one run on the demo site
// instead (they measure nothing under -race; they run so as not to rot).
const raceEnabled = true
