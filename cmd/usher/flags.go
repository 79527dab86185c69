package main

import (
	"flag"
	"fmt"
	"sort"
	"strings"
)

// flagMistake turns the flag package's error for args into one line: the
// flag as the user typed it, the flag they may have meant, and how to see
// the command's flags ("unknown flag --lisen: did you mean --listen? run
// 'usher serve -h' for its flags").
func flagMistake(fs *flag.FlagSet, args []string, err error) error {
	hint := fmt.Sprintf("run '%s -h' for its flags", fs.Name())
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		typed := typedFlag(args, name)
		if near := nearestFlag(fs, name); near != "" {
			return flagError{fmt.Sprintf("unknown flag %s: did you mean --%s? %s", typed, near, hint)}
		}
		return flagError{fmt.Sprintf("unknown flag %s; %s", typed, hint)}
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return flagError{fmt.Sprintf("flag %s needs a value; %s", typedFlag(args, name), hint)}
	}
	return flagError{fmt.Sprintf("%s; %s", msg, hint)}
}

// typedFlag returns the argument in args that named flag name, as typed
// ("--lisen", "-lisen=x" without its value), or -name when none did.
func typedFlag(args []string, name string) string {
	for _, a := range args {
		if a == "--" {
			break
		}
		dashes := len(a) - len(strings.TrimLeft(a, "-"))
		if dashes == 0 || dashes > 2 {
			continue
		}
		typed, _, _ := strings.Cut(a, "=")
		if typed[dashes:] == name {
			return typed
		}
	}
	return "-" + name
}

// nearestFlag returns the flag of fs that a mistyped name most likely
// meant: one that it begins, or that begins it, or within two edits of
// it, the closest first; "" when none is.
func nearestFlag(fs *flag.FlagSet, name string) string {
	type candidate struct {
		name string
		dist int
	}
	var cands []candidate
	fs.VisitAll(func(f *flag.Flag) {
		// A prefix ranks between one edit and two.
		switch d := levenshtein(name, f.Name); {
		case len(name) >= 2 && (strings.HasPrefix(f.Name, name) || strings.HasPrefix(name, f.Name) && len(f.Name) >= 2):
			cands = append(cands, candidate{f.Name, 3})
		case d <= 2 && d < len(name):
			cands = append(cands, candidate{f.Name, 2 * d})
		}
	})
	if len(cands) == 0 {
		return ""
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].dist < cands[j].dist })
	return cands[0].name
}

// levenshtein returns the edit distance between a and b (insertions,
// deletions and substitutions of bytes).
func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// subUsage prints the usage of a command made of subcommands (admin,
// bench): on standard output when asked for (-h, help), on standard error
// when args are missing, before the error that says so.
func (m *Main) subUsage(args []string, name, usage string) {
	w := m.Stdout
	if len(args) == 0 {
		w = m.Stderr
	}
	fmt.Fprintf(w, "Usage: usher %s %s\n", name, usage)
}
