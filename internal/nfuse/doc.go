// Package nfuse is usher's NFuse XML service: the protocol of the Citrix
// XML Service (POST /scripts/wpnbr.dll) that Web Interface, StoreFront,
// monitors and load scripts speak to enumerate and launch published
// resources. It holds a lenient request decoder (ctx1 passwords decoded
// by internal/ctx1), the response renderer (dialect 5.9, as FMA 7.x
// brokers answer) and an http.Handler that serves the protocol over the
// site's broker, through the small Broker interface (a *broker.Broker).
//
// Enumeration answers are rendered once per entitlement set, request
// options and configuration snapshot and then served from memory; every
// request that authenticates or brokers runs in one of the broker's
// admission slots and gets retry-required at once when none is free.
// Errors are NFuse ErrorIds inside the response element, with HTTP 200;
// their details are logged, never sent, and neither are passwords, ctx1
// strings or tickets.
//
// Where the protocol leaves room, usher answers as follows:
//
//   - Every resource has ServerType "win32" and ClientType "ica30", the
//     types NFuse clients ask for.
//   - AppData elements carry no type attribute (nmap's parser matches
//     "<AppData>" literally); Settings@appisdesktop tells desktops apart.
//   - DesiredDetails "permissions" gives a Settings element with the
//     resource's flags and folder, "defaults" the full Settings, "all"
//     everything including icons and the access list.
//   - Folders are the resources' client folders. A Scope at the root
//     lists everything, onelevel or subtree: usher has no administrative
//     folders.
//   - RequestServerData lists the site's configured machines (only to valid
//     credentials when the site's ServerDataCredentials setting is on).
//   - RequestAddress launches by application name or reconnects by
//     session ID; a resource that does not exist and one the user may not
//     use both answer unspecified. FarmLoadHint is always 0.
//   - RequestTicket and RequestLaunchRef redeem, once, the TicketTag or
//     LaunchRef of a recent RequestAddress of the same user.
//   - Local users have no Windows SID: user-identity answers a stable
//     made-up one, derived from the domain and the user name, which
//     trusted requests may repeat.
//
// Each answered request is reported through Config.Observe (brokerprom
// counts them); the brokering it does is observed by the broker itself.
// It imports broker, site, ctx1, hotpath, blob and icon. Only
// internal/server wires it; other packages should not import it.
package nfuse
