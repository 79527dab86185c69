package main

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/usher-vdi/usher/internal/block/image"
)

// imageCmd manages the image store: import, version, promote, merge,
// list, inspect.
func (m *Main) imageCmd(ctx context.Context, args []string) error {
	const usage = `SUBCOMMAND --store DIR ...

Subcommands:
  import NAME FILE         import a raw disk image as version 0 (production)
  version NAME [--note T]  add a maintenance version over the newest
  promote NAME VERSION     maintenance -> test -> production
  merge NAME VERSION       new version with VERSION's content: one delta (default) or --full, a new base
  list                     list images and versions
  inspect NAME [VERSION]   versions, changed blocks and disk use`
	fs := m.flagSet("image", usage)
	store := fs.String("store", "", "image store directory (required)")
	full := fs.Bool("full", false, "merge: make a new base rather than one consolidated delta")
	note := fs.String("note", "", "version: a note on the new version")
	if err := parse(fs, args, 3); err != nil {
		return err
	}
	a := fs.Args()
	if len(a) == 0 {
		return usageError{"missing subcommand: import, version, promote, merge, list or inspect"}
	}
	if *store == "" {
		return usageError{"--store is required"}
	}
	st, err := image.Open(*store)
	if err != nil {
		return err
	}
	need := func(n int) error {
		if len(a)-1 != n {
			return usageError{fmt.Sprintf("image %s takes %d arguments", a[0], n)}
		}
		return nil
	}
	version := func(s string) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return 0, usageError{fmt.Sprintf("version %q is not a number", s)}
		}
		return n, nil
	}
	switch a[0] {
	case "import":
		if err := need(2); err != nil {
			return err
		}
		im, err := st.Import(ctx, a[1], a[2])
		if err != nil {
			return err
		}
		fmt.Fprintf(m.Stdout, "imported %s: %d bytes, version 0 in production\n", im.Name, im.Size)
	case "version":
		if err := need(1); err != nil {
			return err
		}
		v, err := st.NewVersion(ctx, a[1], *note)
		if err != nil {
			return err
		}
		fmt.Fprintf(m.Stdout, "%s version %d (maintenance, over version %d): write to it as export %s@%d\n", a[1], v.Number, v.Parent, a[1], v.Number)
	case "promote", "merge":
		if err := need(2); err != nil {
			return err
		}
		n, err := version(a[2])
		if err != nil {
			return err
		}
		if a[0] == "promote" {
			v, err := st.Promote(ctx, a[1], n)
			if err != nil {
				return err
			}
			fmt.Fprintf(m.Stdout, "%s version %d is now in %s\n", a[1], v.Number, v.State)
			return nil
		}
		v, err := st.Merge(ctx, a[1], n, *full)
		if err != nil {
			return err
		}
		fmt.Fprintf(m.Stdout, "%s version %d: %s merge of version %d (%s), in %s\n", a[1], v.Number, map[bool]string{true: "full", false: "partial"}[*full], n, v.Kind, v.State)
	case "list":
		if err := need(0); err != nil {
			return err
		}
		ims, err := st.List(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "IMAGE\tSIZE\tVERSIONS\tPRODUCTION")
		for _, im := range ims {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", im.Name, im.Size, len(im.Versions), im.Production())
		}
		return tw.Flush()
	case "inspect":
		if len(a) != 2 && len(a) != 3 {
			return usageError{"image inspect takes NAME [VERSION]"}
		}
		im, err := st.Get(ctx, a[1])
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "image %s, %d bytes\n", im.Name, im.Size)
		fmt.Fprintln(tw, "VERSION\tKIND\tPARENT\tSTATE\tCHANGED BLOCKS\tDISK USE\tCREATED\tNOTE")
		for _, v := range im.Versions {
			if len(a) == 3 && a[2] != strconv.Itoa(v.Number) {
				continue
			}
			_, blocks, used, err := st.Inspect(ctx, im.Name, v.Number)
			if err != nil {
				return err
			}
			parent := "-"
			if v.Kind == "delta" {
				parent = strconv.Itoa(v.Parent)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", v.Number, v.Kind, parent, v.State, blocks, used, v.Created.Format("2006-01-02 15:04"), v.Note)
		}
		return tw.Flush()
	default:
		return usageError{fmt.Sprintf("unknown subcommand %q", a[0])}
	}
	return nil
}
