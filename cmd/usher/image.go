package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"text/tabwriter"

	"github.com/usher-vdi/usher/internal/block/image"
	"github.com/usher-vdi/usher/internal/block/imageexport"
	"github.com/usher-vdi/usher/internal/boot/ext4boot"
)

// imageCmd manages the image store: import, version, promote, merge,
// list, inspect.
func (m *Main) imageCmd(ctx context.Context, args []string) error {
	const usage = `SUBCOMMAND --store DIR ...

Subcommands:
  import NAME FILE         import a raw disk image (a file or a block device) as version 0, in
                           production; the only subcommand that creates the store
  version NAME [--note T]  add a maintenance version over the newest
  promote NAME VERSION     maintenance -> test -> production
  merge NAME VERSION       new version with VERSION's content: one delta (default) or --full, a new base
  list                     list images and their production versions
  inspect NAME [VERSION]   versions, states, changed blocks, disk use and digests: a version's
                           64 KiB blocks, how many distinct and zero, and how many differ
                           from its parent's (what a host cache fetches for it); and the
                           kernel and initramfs a network-booted target of each version gets

Version states:
  maintenance  being changed: 'usher stream' serves it as IMAGE@N in private mode (below)
  test         read-only, for test devices: IMAGE@N
  production   what devices boot: IMAGE (and IMAGE@N); one version per image
  superseded   was in production until a newer version was promoted there (Citrix PVS
               shows such a version as released but not the default); still served as
               IMAGE@N for devices on it; it cannot be promoted again, merge it instead

Modes ('usher stream' picks one from the version's state; there is no flag):
  standard  a version out of maintenance, shared read-only by every device; each
            device's writes go to its own write cache ('usher stream --write-cache' or
            'usher target') and vanish at its next boot
  private   a maintenance version, IMAGE@N: one device at a time reads and writes the
            version itself, and its writes stay; promote the version once it has
            disconnected`
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
	// The arguments each subcommand takes: a synopsis, at least, at most.
	arity := map[string]struct {
		synopsis string
		min, max int
	}{
		"import": {"NAME FILE", 2, 2}, "version": {"NAME", 1, 1}, "promote": {"NAME VERSION", 2, 2},
		"merge": {"NAME VERSION", 2, 2}, "list": {"no arguments", 0, 0}, "inspect": {"NAME [VERSION]", 1, 2},
	}
	ar, ok := arity[a[0]]
	if !ok {
		return usageError{fmt.Sprintf("unknown subcommand %q: use import, version, promote, merge, list or inspect", a[0])}
	}
	if n := len(a) - 1; n < ar.min || n > ar.max {
		return usageError{fmt.Sprintf("%s takes %s", a[0], ar.synopsis)}
	}
	if *store == "" {
		return usageError{"--store is required"}
	}
	var st *image.Store
	var err error
	if a[0] == "import" {
		st, err = image.Create(*store)
	} else {
		st, err = openStore(*store)
	}
	if err != nil {
		return err
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
		im, err := st.Import(ctx, a[1], a[2])
		if err != nil {
			return err
		}
		fmt.Fprintf(m.Stdout, "imported %s: %d bytes, version 0 in production\n", im.Name, im.Size)
	case "version":
		v, err := st.NewVersion(ctx, a[1], *note)
		if err != nil {
			return err
		}
		export := imageexport.Name(a[1], v.Number)
		fmt.Fprintf(m.Stdout, "%s version %d (maintenance, over version %d): write to it as export %s, one writer at a time\n", a[1], v.Number, v.Parent, export)
		// A stream as started without TLS (the README's) refuses the
		// export: say what opens it.
		fmt.Fprintf(m.Stdout, "  usher stream opens it to writers whose client certificate --tls-client-ca verifies (usher stream --tls-cert F --tls-key F --tls-client-ca CA;\n"+
			"  usher target --upstream nbds://HOST:PORT/%s --tls-ca F --tls-cert F --tls-key F), or to any client with --auth none\n", export)
	case "promote", "merge":
		n, err := version(a[2])
		if err != nil {
			return err
		}
		if a[0] == "promote" {
			before, err := st.Get(ctx, a[1])
			if err != nil {
				return err
			}
			v, err := st.Promote(ctx, a[1], n)
			if err != nil {
				return err
			}
			if prev := before.Production(); v.State == image.Production && prev >= 0 {
				fmt.Fprintf(m.Stdout, "%s version %d is now in %s (version %d is %s)\n", a[1], v.Number, v.State, prev, image.Superseded)
				return nil
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
		im, err := st.Get(ctx, a[1])
		if err != nil {
			return err
		}
		only := -1
		if len(a) == 3 {
			if only, err = version(a[2]); err != nil {
				return err
			}
			if _, ok := im.Version(only); !ok {
				return fmt.Errorf("image %q has no version %d", im.Name, only)
			}
		}
		tw := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "image %s, %d bytes\n", im.Name, im.Size)
		fmt.Fprintln(tw, "VERSION\tKIND\tPARENT\tSTATE\tCHANGED BLOCKS\tDISK USE\tDIGEST BLOCKS\tDISTINCT\tZERO\tDIFFER FROM PARENT\tCREATED\tNOTE")
		for _, v := range im.Versions {
			if only >= 0 && v.Number != only {
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
			// A maintenance version has no digests until promoted.
			digests := "-\t-\t-\t-"
			if v.State != image.Maintenance {
				ds, err := st.InspectDigests(ctx, im.Name, v.Number)
				if err != nil {
					return err
				}
				differ := "-"
				if ds.Changed >= 0 {
					differ = strconv.FormatInt(ds.Changed, 10)
				}
				digests = fmt.Sprintf("%d\t%d\t%d\t%s", ds.Blocks, ds.Distinct, ds.Zero, differ)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", v.Number, v.Kind, parent, v.State, blocks, used, digests, v.Created.Format("2006-01-02 15:04"), v.Note)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		// What a network-booted target of each version gets (usher serve
		// --boot-listen).
		fmt.Fprintln(m.Stdout, "\nnetwork boot (kernel and initramfs in the version's ext4 filesystem):")
		for _, v := range im.Versions {
			if only >= 0 && v.Number != only {
				continue
			}
			fmt.Fprintf(m.Stdout, "  version %d: %s\n", v.Number, bootFiles(ctx, st, im.Name, v.Number))
		}
		return nil
	}
	return nil
}

// bootFiles says which kernel and initramfs version n of an image boots.
func bootFiles(ctx context.Context, st *image.Store, name string, n int) string {
	dev, err := st.OpenVersion(ctx, name, n, false)
	if err != nil {
		return err.Error()
	}
	defer dev.Close()
	fsys, err := ext4boot.Open(ctx, dev)
	if err != nil {
		return err.Error()
	}
	defer fsys.Close()
	files, err := fsys.Find()
	if err != nil {
		return err.Error()
	}
	where := ""
	if files.Partition > 0 {
		where = fmt.Sprintf(" (partition %d)", files.Partition)
	}
	return fmt.Sprintf("kernel /%s, initrd /%s%s", files.Kernel, files.Initrd, where)
}

// openStore opens the existing image store in dir; a missing one is an
// error that says how to make one.
func openStore(dir string) (*image.Store, error) {
	st, err := image.Open(dir)
	if _, serr := os.Stat(dir); errors.Is(err, image.ErrNoStore) && errors.Is(serr, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w (usher image import NAME FILE --store %s creates one)", err, dir)
	}
	return st, err
}
