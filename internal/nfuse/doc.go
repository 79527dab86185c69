// Package nfuse is usher's NFuse XML service: the protocol of the Citrix
// XML Service (POST /scripts/wpnbr.dll) that Web Interface, StoreFront,
// monitors and load scripts speak to enumerate and launch published
// resources. It holds a lenient request decoder, the ctx1 password codec,
// the response renderer (dialect 5.9, as FMA 7.x brokers answer) and an
// http.Handler that serves the protocol over a *broker.Broker.
//
// Enumeration answers are rendered once per entitlement set, request
// options and configuration snapshot and then served from memory; every
// request that authenticates or brokers runs in one of the broker's
// admission slots and gets retry-required at once when none is free.
// Errors are NFuse ErrorIds inside the response element, with HTTP 200;
// their details are logged, never sent.
//
// Only cmd/usher wires it; other packages should not import it.
package nfuse
