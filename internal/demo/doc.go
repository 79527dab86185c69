// Package demo builds the example site: the configuration that `usher serve
// --demo` starts with, that examples/site.yaml holds and that tests and
// benchmarks run against. Its sizes are those of the seed experiments: 57
// session hosts, 400 published applications, 1,000 users.
//
// Any package may import it; it imports only the domain (site) and auth,
// whose password hashes Load stores.
package demo
