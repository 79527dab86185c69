package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"go.yaml.in/yaml/v3"
)

// configFile is the value of a command's --config flag: a YAML file of
// the command's flags. parse reads it after the command line, so that it
// serves every flag of the flag set with one mechanism and flags given on
// the command line win.
type configFile struct{ path string }

func (c *configFile) String() string     { return c.path }
func (c *configFile) Set(s string) error { c.path = s; return nil }

// configFlag gives fs a --config flag.
func configFlag(fs *flag.FlagSet) {
	fs.Var(&configFile{}, "config", "YAML file of this command's flags, each keyed by its name without dashes "+
		"(listen: 127.0.0.1:8080); a flag given on the command line overrides the file; a flag given more than once takes a list")
}

// maxConfigFile bounds a configuration file: it holds flags, not data.
const maxConfigFile = 1 << 20

// loadConfig sets the flags of fs that the command line did not set from
// the --config file, when fs has one and it was given. The file is one
// YAML mapping from flag names (without dashes) to values, or to lists of
// values for flags that take several. Mistakes are usage errors that
// name the file and line: an unknown key (and the flag it may mean), a
// value the flag refuses, a nested mapping.
func loadConfig(fs *flag.FlagSet) error {
	f := fs.Lookup("config")
	if f == nil {
		return nil
	}
	cf, ok := f.Value.(*configFile)
	if !ok || cf.path == "" {
		return nil
	}
	path := cf.path
	raw, err := os.ReadFile(path)
	if err != nil {
		return usageError{fmt.Sprintf("--config: %v", err)}
	}
	if len(raw) > maxConfigFile {
		return usageError{fmt.Sprintf("--config %s: larger than %d bytes", path, maxConfigFile)}
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(raw)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file, or only comments, sets nothing
		}
		return usageError{fmt.Sprintf("%s: %v", path, err)}
	}
	if len(doc.Content) == 0 {
		return nil
	}
	top := doc.Content[0]
	if top.Kind == yaml.ScalarNode && top.Tag == "!!null" {
		return nil // only comments
	}
	if top.Kind != yaml.MappingNode {
		return usageError{fmt.Sprintf("%s:%d: want a mapping of flag names to values", path, top.Line)}
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	seen := map[string]int{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		key := k.Value
		at := fmt.Sprintf("%s:%d", path, k.Line)
		fl := fs.Lookup(key)
		switch {
		case k.Kind != yaml.ScalarNode:
			return usageError{fmt.Sprintf("%s: a key must be a flag name", at)}
		case fl == nil:
			if near := nearestFlag(fs, key); near != "" {
				return usageError{fmt.Sprintf("%s: unknown key %q (did you mean %q?)", at, key, near)}
			}
			return usageError{fmt.Sprintf("%s: unknown key %q", at, key)}
		case key == "config":
			return usageError{fmt.Sprintf("%s: key \"config\": a configuration file cannot name another", at)}
		case seen[key] != 0:
			return usageError{fmt.Sprintf("%s: key %q again (first at line %d)", at, key, seen[key])}
		}
		seen[key] = k.Line
		var values []*yaml.Node
		switch {
		case v.Kind == yaml.SequenceNode:
			values = v.Content
		case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
			return usageError{fmt.Sprintf("%s: key %q has no value", at, key)}
		default:
			values = []*yaml.Node{v}
		}
		if onCommandLine[key] {
			continue
		}
		for _, val := range values {
			if val.Kind != yaml.ScalarNode {
				return usageError{fmt.Sprintf("%s:%d: key %q takes a value or a list of values, not a mapping", path, val.Line, key)}
			}
			if err := fs.Set(key, val.Value); err != nil {
				return usageError{fmt.Sprintf("%s:%d: key %q: %v", path, val.Line, key, err)}
			}
		}
	}
	return nil
}
