package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/usher-vdi/usher/internal/figures"
)

// benchFigures keeps benches' headlines in docs/figures and writes the
// README's Figures section from them.
func (m *Main) benchFigures(_ context.Context, args []string) error {
	fs := m.flagSet("bench figures", "[flags] [NAME=REPORT_DIR ...]\n\n"+
		"Writes the README's Figures section (between its figures markers) from the headlines kept in --dir, one\n"+
		"NAME.json per report, in name order. Each NAME=REPORT_DIR argument first keeps the headlines of that\n"+
		"report (a directory a bench wrote with --out, or its report.json) as --dir/NAME.json. With --check,\n"+
		"nothing is written and the exit status says whether the README is up to date.")
	dir := fs.String("dir", "docs/figures", "where the kept headlines are")
	readme := fs.String("readme", "README.md", "the document whose Figures section is written")
	check := fs.Bool("check", false, "only check that the README's section is what the kept headlines make")
	if err := parse(fs, args, 1<<20); err != nil {
		return err
	}
	for _, a := range fs.Args() {
		name, path, ok := strings.Cut(a, "=")
		if !ok || name == "" || path == "" {
			return usageError{fmt.Sprintf("argument %q: want NAME=REPORT_DIR", a)}
		}
		s, err := figures.FromReport(path)
		if err != nil {
			return err
		}
		if err := figures.Save(*dir, name, s); err != nil {
			return err
		}
		fmt.Fprintf(m.Stdout, "kept %d headlines of %q as %s/%s.json\n", len(s.Headlines), s.Command, *dir, name)
	}
	srcs, err := figures.Load(*dir)
	if err != nil {
		return err
	}
	doc, err := os.ReadFile(*readme)
	if err != nil {
		return err
	}
	out, err := figures.Splice(string(doc), figures.Markdown(srcs))
	if err != nil {
		return fmt.Errorf("%s: %w", *readme, err)
	}
	if out == string(doc) {
		fmt.Fprintf(m.Stdout, "%s: figures up to date (%d reports)\n", *readme, len(srcs))
		return nil
	}
	if *check {
		return errors.New(*readme + ": figures differ from " + *dir + ": run usher bench figures")
	}
	if err := os.WriteFile(*readme, []byte(out), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "%s: figures written from %d reports\n", *readme, len(srcs))
	return nil
}
