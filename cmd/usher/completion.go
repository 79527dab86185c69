package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// subcommands are the second words of the commands made of subcommands,
// for completion (each one's flags are its own flag set's).
var subcommands = map[string][]string{
	"admin":     {"add", "list", "reset-password", "remove", "enrol-token", "revoke-credential", "rotate-secret", "unlock", "outage"},
	"bench":     {"launch", "logon-storm", "enumerate", "writecache", "nbd", "lhc", "hostcache", "boot", "display", "figures"},
	"image":     {"import", "version", "promote", "merge", "list", "inspect"},
	"directory": {"test"},
	"hostcache": {"warm"},
	"load":      {"users"},
}

// completionCommand is what the completion scripts know of one command:
// its flags, and its subcommands with theirs.
type completionCommand struct {
	name, summary string
	flags         []completionFlag
	subs          []completionSub
}

type completionSub struct {
	name  string
	flags []completionFlag
}

type completionFlag struct{ name, usage string }

// completion prints a shell's completion script for usher: its commands,
// their subcommands and each one's flags, read from the flag sets the
// commands make (by running each with -h, quietly).
func (m *Main) completion(ctx context.Context, args []string) error {
	fs := m.flagSet("completion", "bash|zsh|fish\n\n"+
		"Prints a completion script for usher's commands and flags. Load it with:\n"+
		"  bash: source <(usher completion bash)   (or write it to /etc/bash_completion.d/usher)\n"+
		"  zsh:  source <(usher completion zsh)\n"+
		"  fish: usher completion fish | source    (or write it to ~/.config/fish/completions/usher.fish)")
	if err := parse(fs, args, 1); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{"completion needs a shell: bash, zsh or fish"}
	}
	cmds := m.completionCommands(ctx)
	switch fs.Arg(0) {
	case "bash":
		writeBashCompletion(m.Stdout, cmds)
	case "zsh":
		fmt.Fprint(m.Stdout, "#compdef usher\n# zsh completion for usher, through zsh's bash completion support.\nautoload -U +X bashcompinit && bashcompinit\n")
		writeBashCompletion(m.Stdout, cmds)
	case "fish":
		writeFishCompletion(m.Stdout, cmds)
	default:
		return usageError{fmt.Sprintf("completion %q: want bash, zsh or fish", fs.Arg(0))}
	}
	return nil
}

// completionCommands reads every command's flags and subcommands.
func (m *Main) completionCommands(ctx context.Context) []completionCommand {
	flagsOf := func(args ...string) []completionFlag {
		var last *flag.FlagSet
		probe := &Main{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" },
			flagSetMade: func(fs *flag.FlagSet) { last = fs }}
		probe.Run(ctx, append(args, "-h"))
		if last == nil {
			return nil
		}
		var flags []completionFlag
		last.VisitAll(func(f *flag.Flag) { flags = append(flags, completionFlag{f.Name, f.Usage}) })
		return flags
	}
	var cmds []completionCommand
	for _, c := range commands() {
		cc := completionCommand{name: c.name, summary: c.summary, flags: flagsOf(c.name)}
		for _, s := range subcommands[c.name] {
			cc.subs = append(cc.subs, completionSub{s, flagsOf(c.name, s)})
		}
		cmds = append(cmds, cc)
	}
	return cmds
}

func dashed(flags []completionFlag) []string {
	var w []string
	for _, f := range flags {
		if len(f.name) == 1 {
			w = append(w, "-"+f.name) // -f, as the usage shows it
		} else {
			w = append(w, "--"+f.name)
		}
	}
	return w
}

func writeBashCompletion(w io.Writer, cmds []completionCommand) {
	var names []string
	for _, c := range cmds {
		names = append(names, c.name)
	}
	fmt.Fprintf(w, `# bash completion for usher (usher completion bash).
_usher() {
	local cur=${COMP_WORDS[COMP_CWORD]} words=""
	if [ "$COMP_CWORD" -eq 1 ]; then
		words="%s help"
	else
		case "${COMP_WORDS[1]}" in
		help) words="%[1]s" ;;
`, strings.Join(names, " "))
	for _, c := range cmds {
		if len(c.subs) == 0 {
			fmt.Fprintf(w, "\t\t%s) words=%q ;;\n", c.name, strings.Join(dashed(c.flags), " "))
			continue
		}
		var subs []string
		for _, s := range c.subs {
			subs = append(subs, s.name)
		}
		fmt.Fprintf(w, "\t\t%s)\n\t\t\tif [ \"$COMP_CWORD\" -eq 2 ]; then\n\t\t\t\twords=%q\n\t\t\telse\n\t\t\t\tcase \"${COMP_WORDS[2]}\" in\n",
			c.name, strings.Join(append(subs, dashed(c.flags)...), " "))
		for _, s := range c.subs {
			fmt.Fprintf(w, "\t\t\t\t%s) words=%q ;;\n", s.name, strings.Join(dashed(s.flags), " "))
		}
		fmt.Fprintf(w, "\t\t\t\tesac\n\t\t\tfi ;;\n")
	}
	fmt.Fprint(w, `		esac
	fi
	COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o default -F _usher usher
`)
}

// fishQuote quotes s for fish, in single quotes.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// short is the first clause of a usage text, for a completion's
// description.
func short(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if i := strings.IndexAny(s, ";("); i > 0 {
		s = s[:i]
	}
	s = strings.TrimSpace(s)
	if r := []rune(s); len(r) > 70 {
		s = string(r[:69]) + "…"
	}
	return s
}

func writeFishCompletion(w io.Writer, cmds []completionCommand) {
	fmt.Fprint(w, `# fish completion for usher (usher completion fish).
function __usher_nargs --description 'usher: the command line has this many words before the cursor'
	test (count (commandline -opc)) -eq $argv[1]
end
function __usher_words --description 'usher: the command line is usher COMMAND [SUBCOMMAND] ...'
	set -l w (commandline -opc)
	test (count $w) -ge 2; and test "$w[2]" = "$argv[1]"; or return 1
	test (count $argv) -lt 2; and return 0
	test (count $w) -ge 3; and test "$w[3]" = "$argv[2]"
end
complete -c usher -n '__usher_nargs 1' -f -a help -d 'list the commands, or show one'
`)
	flags := func(cond string, fl []completionFlag) {
		sort.SliceStable(fl, func(i, j int) bool { return fl[i].name < fl[j].name })
		for _, f := range fl {
			opt := "-l"
			if len(f.name) == 1 {
				opt = "-s"
			}
			fmt.Fprintf(w, "complete -c usher -n %s %s %s -d %s\n", fishQuote(cond), opt, f.name, fishQuote(short(f.usage)))
		}
	}
	for _, c := range cmds {
		fmt.Fprintf(w, "complete -c usher -n '__usher_nargs 1' -f -a %s -d %s\n", c.name, fishQuote(short(c.summary)))
		flags("__usher_words "+c.name, c.flags)
		for _, s := range c.subs {
			fmt.Fprintf(w, "complete -c usher -n %s -f -a %s\n", fishQuote("__usher_words "+c.name+"; and __usher_nargs 2"), s.name)
			flags("__usher_words "+c.name+" "+s.name, s.flags)
		}
	}
}
