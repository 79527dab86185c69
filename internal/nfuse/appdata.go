package nfuse

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/blob"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
)

// A RequestAppData answer is assembled from fragments rendered once per
// resource and snapshot (the AppData's head and tail, its Settings at two
// levels of detail, its access list), and icons rendered once per icon
// and size. Whole answers without icons are cached per entitlement set
// (broker.Entitlements.Rendered) and request variant, so that a repeated
// enumeration is a map lookup and a write. The variants are few (see
// appDataQuery.variant), which bounds that cache whatever clients send;
// answers that name a folder or an application, or carry icons, are
// assembled from the fragments on each request.

// details is a set of DesiredDetails.
type details uint8

const (
	// detDefaults renders the full Settings.
	detDefaults details = 1 << iota
	// detPermissions renders Settings with what a client needs to list
	// and launch the resource: its flags and folder.
	detPermissions
	detIconInfo
	detIcon
	detAccessList
)

// detailsOf reads DesiredDetails; none means defaults. Values usher has
// nothing for (file-type, rade-offline-mode) and unknown ones add nothing.
func detailsOf(list []string) details {
	if len(list) == 0 {
		return detDefaults
	}
	var d details
	for _, v := range list {
		switch v {
		case "defaults":
			d |= detDefaults
		case "permissions":
			d |= detPermissions
		case "icon-info":
			d |= detIconInfo
		case "icon":
			d |= detIcon
		case "access-list":
			d |= detAccessList
		case "all":
			d |= detDefaults | detPermissions | detIconInfo | detIcon | detAccessList
		}
	}
	return d
}

// Settings levels.
const (
	settingsNone = iota
	settingsPermissions
	settingsFull
)

// appDataQuery is a RequestAppData's options, normalized.
type appDataQuery struct {
	details  details
	settings int  // settingsNone, settingsPermissions or settingsFull
	subtree  bool // traverse="subtree"
	folder   string
	appName  string
	// icon is set when the answer carries icon data: as IconData of
	// iconSpec when the client sent DesiredIconData, else as Icon.
	icon     bool
	iconSpec *IconSpec
	// none is set when the type filters exclude usher's resources.
	none bool
}

func queryOf(req *Request) appDataQuery {
	q := appDataQuery{
		details: detailsOf(req.DesiredDetails),
		subtree: req.Scope.Traverse == "subtree",
		folder:  normalizeFolder(req.Scope.Folder),
		appName: req.AppName,
		none:    !typesMatch(req),
	}
	switch {
	case q.details&detDefaults != 0:
		q.settings = settingsFull
	case q.details&detPermissions != 0:
		q.settings = settingsPermissions
	}
	q.iconSpec = req.DesiredIconData
	q.icon = q.details&detIcon != 0 || q.iconSpec != nil
	return q
}

// cacheable reports whether the answer is cached whole: it lists from the
// root, for every application, without icons.
func (q *appDataQuery) cacheable() bool {
	return q.folder == "" && q.appName == "" && !q.icon && !q.none
}

// variant numbers a cacheable query: settings level x icon-info x
// access-list x traverse.
func (q *appDataQuery) variant() int {
	v := q.settings
	v = v*2 + b2i(q.details&detIconInfo != 0)
	v = v*2 + b2i(q.details&detAccessList != 0)
	v = v*2 + b2i(q.subtree)
	return v
}

const numVariants = 3 * 2 * 2 * 2

// variantKeys are the Entitlements.Rendered keys of the variants.
var variantKeys = func() (keys [numVariants]string) {
	for i := range keys {
		keys[i] = "nfuse/appdata/" + strconv.Itoa(i)
	}
	return keys
}()

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// normalizeFolder turns a Scope folder into usher's form: separated by
// "/", without leading or trailing separators.
func normalizeFolder(f string) string {
	f = strings.ReplaceAll(f, `\`, "/")
	return strings.Trim(f, "/ ")
}

// inScope reports whether a resource is listed by the query's scope.
// usher's only folders are the resources' client folders (Settings/Folder).
// subtree lists a folder and everything below it; onelevel lists a
// folder's own resources, except at the root, where it lists everything as
// subtree does: usher has no administrative folders (Citrix's onelevel
// walks those, and with none every application is at their root), and
// clients that ask for the root one level deep, such as nmap's
// citrix-enum-apps-xml, expect the farm's applications.
func (q *appDataQuery) inScope(r *site.Resource) bool {
	if q.appName != "" && !strings.EqualFold(r.Name, q.appName) {
		return false
	}
	switch {
	case q.folder == "":
		return true
	case strings.EqualFold(r.Folder, q.folder):
		return true
	case q.subtree:
		return len(r.Folder) > len(q.folder) && r.Folder[len(q.folder)] == '/' && strings.EqualFold(r.Folder[:len(q.folder)], q.folder)
	}
	return false
}

// appData lists the user's resources, or, for a request without
// credentials when the site's AnonymousAppData setting is on, every
// enabled resource.
func (h *Handler) appData(ctx context.Context, x *exchange) []byte {
	start := time.Now()
	snap := h.broker.Snapshot()
	q := queryOf(x.req)
	u, err := h.authenticate(ctx, snap, x.req.Credentials, remoteHost(x))
	sc := h.snapCache(snap)
	switch {
	case errors.Is(err, errNoCredentials) && snap.Settings.AnonymousAppData:
		if q.cacheable() {
			x.shared = sc.anonymous(q.variant(), func() []byte { return h.renderAppData(sc, snap.Resources(), &q) })
			return x.shared.Bytes()
		}
		return h.appDataInto(x, sc, snap.Resources(), &q)
	case errors.Is(err, broker.ErrWouldWait):
		x.wait = true
		return nil
	case err != nil:
		h.logonFailed(x, err)
		return h.fail(x, err)
	}
	x.user = u.Name
	e := h.broker.EntitlementsOf(snap, u.Name)
	defer h.broker.Observe(broker.OpEnumerate, start, nil)
	if q.cacheable() {
		x.shared = e.Rendered(variantKeys[q.variant()], func() []byte { return h.renderAppData(sc, e.Resources, &q) })
		return x.shared.Bytes()
	}
	return h.appDataInto(x, sc, e.Resources, &q)
}

// renderAppData renders a whole answer into a new slice, for a cache.
func (h *Handler) renderAppData(sc *snapCache, list []*site.Resource, q *appDataQuery) []byte {
	w := &xmlw{b: make([]byte, 0, 1024+len(list)*sc.averageFragment(q))}
	h.writeAppData(w, sc, list, q)
	return w.b
}

// appDataInto renders an answer into the exchange's buffer.
func (h *Handler) appDataInto(x *exchange, sc *snapCache, list []*site.Resource, q *appDataQuery) []byte {
	h.writeAppData(&x.w, sc, list, q)
	return x.w.b
}

func (h *Handler) writeAppData(w *xmlw, sc *snapCache, list []*site.Resource, q *appDataQuery) {
	w.raw(prolog)
	w.start("ResponseAppData")
	w.elem("LeasingStatus", leasingStatus)
	w.start("AppDataSet")
	traverse := "onelevel"
	if q.subtree {
		traverse = "subtree"
	}
	if q.folder == "" {
		w.empty("Scope", "traverse", traverse)
	} else {
		w.startAttrs("Scope", "traverse", traverse)
		w.b = appendEscaped(w.b, q.folder)
		w.end("Scope")
	}
	if !q.none {
		for _, r := range list {
			if !q.inScope(r) {
				continue
			}
			if p := sc.part(r.Name); p != nil {
				h.writeResource(w, p, q)
			}
		}
	}
	w.end("AppDataSet")
	w.end("ResponseAppData")
	w.raw(epilog)
}

// writeResource writes one AppData element:
//
//	<AppData><InName/><FName/><Details>Settings, IconInfo, Icon or IconData</Details>
//	<SeqNo/><ServerType/><ClientType/><AccessList/></AppData>
//
// AppData has no type attribute: nmap's citrixxml parser matches
// "<AppData>" literally, and Settings@appisdesktop tells desktops apart.
func (h *Handler) writeResource(w *xmlw, p *resourceParts, q *appDataQuery) {
	w.rawb(p.head)
	if q.settings != settingsNone || q.details&detIconInfo != 0 || q.icon {
		w.start("Details")
		if q.settings != settingsNone {
			w.rawb(p.settings[q.settings])
		}
		if q.details&detIconInfo != 0 {
			w.raw(iconInfo)
		}
		if q.icon {
			if s := q.iconSpec; s != nil {
				size, format := iconSize(s.Size), "png"
				if s.Format == "raw" {
					format = "raw"
				}
				w.startAttrs("IconData", "size", strconv.Itoa(size), "bpp", "32", "format", format)
				w.raw(h.iconOf(p, size, format == "raw"))
				w.end("IconData")
			} else {
				w.start("Icon")
				w.raw(h.iconOf(p, defaultIconSize, true))
				w.end("Icon")
			}
		}
		w.end("Details")
	}
	w.rawb(p.tail)
	if q.details&detAccessList != 0 {
		w.rawb(p.access)
	}
	w.raw("</AppData>")
}

// iconInfo lists the icons usher can send.
var iconInfo = func() string {
	w := &xmlw{}
	w.start("IconInfo")
	for _, s := range iconSizes {
		w.empty("IconType", "size", strconv.Itoa(s), "bpp", "32", "format", "png")
	}
	w.end("IconInfo")
	return string(w.b)
}()

// resourceParts are the pre-rendered fragments of one resource's AppData.
type resourceParts struct {
	head     []byte    // <AppData><InName/><FName/>
	settings [3][]byte // Settings per settings level
	tail     []byte    // <SeqNo/><ServerType/><ClientType/>
	access   []byte    // <AccessList/>
	icon     string    // the resource's icon, "builtin:NAME" or a data URI

	// dataIcons caches a data URI icon's renderings with the resource,
	// rather than in the handler's cache keyed by the (long) URI.
	mu        sync.Mutex
	dataIcons map[iconKey]string
}

// iconOf returns a resource's icon as base64: a builtin one from the
// handler's cache, a data URI's from the resource's.
func (h *Handler) iconOf(p *resourceParts, size int, ico bool) string {
	if !strings.HasPrefix(p.icon, "data:") {
		return h.icons.base64(p.icon, size, ico)
	}
	k := iconKey{size: iconSize(size), ico: ico}
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.dataIcons[k]; ok {
		return s
	}
	if p.dataIcons == nil {
		p.dataIcons = map[iconKey]string{}
	}
	s := renderIcon(p.icon, k.size, ico)
	p.dataIcons[k] = s
	return s
}

func renderParts(snap *broker.Snapshot, r *site.Resource) *resourceParts {
	p := &resourceParts{icon: r.Icon}
	if p.icon == "" {
		p.icon = "builtin:" + string(r.Kind)
	}
	w := &xmlw{}
	w.start("AppData")
	w.elem("InName", r.Name)
	w.elem("FName", r.DisplayName)
	p.head, w.b = w.b, nil

	desktop := strconv.FormatBool(r.Kind == site.Desktop)
	w.startAttrs("Settings", "appisdisabled", strconv.FormatBool(r.Disabled), "appisdesktop", desktop)
	w.elem("Folder", r.Folder)
	w.end("Settings")
	p.settings[settingsPermissions], w.b = w.b, nil

	w.startAttrs("Settings", "appisdisabled", strconv.FormatBool(r.Disabled), "appisdesktop", desktop)
	w.elem("Folder", r.Folder)
	w.elem("Description", r.Description)
	w.startAttrs("Encryption", "minimum", "false")
	w.raw("basic")
	w.end("Encryption")
	w.empty("AppOnDesktop", "value", "false")
	w.empty("AppInStartmenu", "value", "false")
	w.elem("PublisherName", snap.Settings.Name)
	w.elem("SSLEnabled", "false")
	w.elem("RemoteAccessEnabled", "true")
	w.end("Settings")
	p.settings[settingsFull], w.b = w.b, nil

	w.elemInt("SeqNo", snap.Version)
	w.elem("ServerType", serverType)
	w.elem("ClientType", clientType)
	p.tail, w.b = w.b, nil

	users, groups := snap.AccessList(r.Name)
	domain := snap.Settings.Domain
	w.start("AccessList")
	for _, g := range groups {
		w.start("Group")
		w.elem("GroupName", g)
		w.elem("Domain", domain)
		w.end("Group")
	}
	for _, u := range users {
		w.start("User")
		w.elem("UserName", u)
		w.elem("Domain", domain)
		w.end("User")
	}
	w.end("AccessList")
	p.access = w.b
	return p
}

// snapCache holds what is rendered once per configuration snapshot.
type snapCache struct {
	snap *broker.Snapshot

	partsOnce sync.Once
	parts     map[string]*resourceParts
	avg       [3]int // average fragment size per settings level

	serverOnce sync.Once
	servers    []byte

	anonMu sync.Mutex
	anon   [numVariants]*blob.Blob
}

// snapCache returns the cache of a snapshot. The newest snapshot's cache
// is kept; a request still holding an older snapshot gets a cache of its
// own, so that no answer mixes two snapshots.
func (h *Handler) snapCache(snap *broker.Snapshot) *snapCache {
	for {
		cur := h.snaps.Load()
		switch {
		case cur != nil && cur.snap == snap:
			return cur
		case cur != nil && cur.snap.Version > snap.Version:
			return &snapCache{snap: snap}
		}
		next := &snapCache{snap: snap}
		if h.snaps.CompareAndSwap(cur, next) {
			return next
		}
	}
}

// part returns a resource's fragments, rendering every resource's on
// first use; nil for a resource not in the snapshot.
func (c *snapCache) part(name string) *resourceParts {
	c.partsOnce.Do(c.renderParts)
	return c.parts[name]
}

func (c *snapCache) renderParts() {
	all := c.snap.Resources()
	c.parts = make(map[string]*resourceParts, len(all))
	var sum [3]int
	for _, r := range all {
		p := renderParts(c.snap, r)
		c.parts[r.Name] = p
		for lvl := range sum {
			sum[lvl] += len(p.head) + len(p.settings[lvl]) + len(p.tail) + len(p.access)
		}
	}
	for lvl := range sum {
		c.avg[lvl] = sum[lvl]/max(1, len(all)) + 32
	}
}

// averageFragment estimates the size of one AppData, to size buffers.
func (c *snapCache) averageFragment(q *appDataQuery) int {
	c.partsOnce.Do(c.renderParts)
	n := c.avg[q.settings]
	if q.details&detIconInfo != 0 {
		n += len(iconInfo)
	}
	return n
}

// anonymous returns the anonymous answer of a variant, rendering it once.
func (c *snapCache) anonymous(variant int, render func() []byte) *blob.Blob {
	c.anonMu.Lock()
	defer c.anonMu.Unlock()
	if c.anon[variant] == nil {
		c.anon[variant] = blob.New(render())
	}
	return c.anon[variant]
}

// serverData returns the ServerData elements of the snapshot's machines.
func (c *snapCache) serverData() []byte {
	c.serverOnce.Do(func() {
		w := &xmlw{}
		for _, name := range c.snap.MachineNames() {
			w.start("ServerData")
			w.start("Name")
			w.elem("ServerName", name)
			w.end("Name")
			w.elem("ServerType", serverType)
			w.elem("ClientType", clientType)
			w.end("ServerData")
		}
		c.servers = w.b
	})
	return c.servers
}
