package api

import (
	"strconv"
	"strings"
	"unicode"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
)

type launchFileExt struct {
	LaunchFile
	ext string
}

// launchFile writes the file a desktop client opens: .rdp for RDP hosts
// (the ticket rides in loadbalanceinfo, as RDP routing tokens do), .ica
// for ICA hosts. Its fields are validated where they enter the site; the
// writers drop whatever could still break a line or a section, so that
// no value can add a setting of its own.
func launchFile(domain, user string, res *site.Resource, l *broker.Launch, host string, port int) launchFileExt {
	name := "session"
	if res != nil {
		name = res.DisplayName
	}
	safe := strings.Map(func(r rune) rune {
		if lineBreaking(r) || strings.ContainsRune(`/\"*:?<>|`, r) {
			return '_'
		}
		return r
	}, oneLine(name))
	if l.Protocol == "ica" {
		var f icaFile
		f.section("Encoding")
		f.set("InputEncoding", "UTF8")
		f.section("WFClient")
		f.set("Version", "2")
		f.section("ApplicationServers")
		f.set(name, "")
		f.section(name)
		f.set("Address", host+":"+strconv.Itoa(port))
		f.set("InitialProgram", "#"+name)
		f.set("LogonTicket", l.Ticket)
		f.set("Username", user)
		f.set("Domain", domain)
		f.set("TransportDriver", "TCP/IP")
		return launchFileExt{LaunchFile{Filename: safe + ".ica", ContentType: "application/x-ica", Content: f.b.String()}, "ica"}
	}
	var f rdpFile
	f.str("full address", host+":"+strconv.Itoa(port))
	f.str("username", domain+`\`+user)
	f.str("loadbalanceinfo", "usher-ticket:"+l.Ticket)
	f.int("prompt for credentials", 0)
	f.int("authentication level", 2)
	if res != nil && res.Kind == site.Application {
		f.int("remoteapplicationmode", 1)
		f.str("remoteapplicationname", res.DisplayName)
		f.str("remoteapplicationprogram", "||"+res.Name)
	}
	return launchFileExt{LaunchFile{Filename: safe + ".rdp", ContentType: "application/x-rdp", Content: f.b.String()}, "rdp"}
}

// lineBreaking reports whether r may end a line for some reader of a
// launch file: control characters (CR, LF, NEL, ...), Unicode line and
// paragraph separators, and the replacement of invalid UTF-8.
func lineBreaking(r rune) bool {
	return unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || r == unicode.ReplacementChar
}

// oneLine returns v without any rune that could break its line.
func oneLine(v string) string {
	if strings.IndexFunc(v, lineBreaking) < 0 {
		return v
	}
	return strings.Map(func(r rune) rune {
		if lineBreaking(r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(v, ""))
}

// rdpFile writes an .rdp file: "name:type:value" lines, CRLF-terminated.
// A value is the rest of its line, so dropping line breaks from it is all
// the escaping the format needs.
type rdpFile struct{ b strings.Builder }

func (f *rdpFile) str(name, value string) {
	f.b.WriteString(name)
	f.b.WriteString(":s:")
	f.b.WriteString(oneLine(value))
	f.b.WriteString("\r\n")
}

func (f *rdpFile) int(name string, value int) {
	f.b.WriteString(name)
	f.b.WriteString(":i:")
	f.b.WriteString(strconv.Itoa(value))
	f.b.WriteString("\r\n")
}

// icaFile writes an .ica file, an INI file: "[section]" headers and
// "key=value" lines, CRLF-terminated, a blank line between sections.
// Section names lose brackets and keys lose "=" (and both a leading ";",
// which starts a comment), besides line breaks, so that a name from the
// site can neither end its header early nor pose as another key.
type icaFile struct{ b strings.Builder }

func (f *icaFile) section(name string) {
	if f.b.Len() > 0 {
		f.b.WriteString("\r\n")
	}
	f.b.WriteString("[")
	f.b.WriteString(iniName(name, "[]"))
	f.b.WriteString("]\r\n")
}

func (f *icaFile) set(key, value string) {
	f.b.WriteString(iniName(key, "=[]"))
	f.b.WriteString("=")
	f.b.WriteString(oneLine(value))
	f.b.WriteString("\r\n")
}

// iniName returns name on one line, without the runes of drop and without
// a leading ";" or space.
func iniName(name, drop string) string {
	name = strings.Map(func(r rune) rune {
		if strings.ContainsRune(drop, r) {
			return -1
		}
		return r
	}, oneLine(name))
	return strings.TrimLeft(name, "; ")
}
