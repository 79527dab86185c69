//go:build race

package main

// raceEnabled: the race detector makes the pure-Go SQLite of the Local
// Host Cache's copy, and everything else, many times slower.
const raceEnabled = true
