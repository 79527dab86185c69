// Package web serves the pages people open in a browser: today the site's
// public index page; the user portal and the console join it here. Pages
// read the broker's in-memory snapshot, never the site DB, so that a
// public page costs no database read. It imports the domain (site,
// broker), icon and net/http; internal/server mounts it.
package web
