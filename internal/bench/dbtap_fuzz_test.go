package bench

import (
	"encoding/binary"
	"reflect"
	"testing"
)

// frontend builds a frontend stream: a startup message, then messages of
// the given types and bodies.
func frontend(msgs ...any) []byte {
	startup := binary.BigEndian.AppendUint32(nil, 8)
	out := binary.BigEndian.AppendUint32(startup, 196608) // protocol 3.0
	for i := 0; i+1 < len(msgs); i += 2 {
		body := []byte(msgs[i+1].(string))
		out = append(out, msgs[i].(byte))
		out = binary.BigEndian.AppendUint32(out, uint32(len(body)+4))
		out = append(out, body...)
	}
	return out
}

// FuzzTapParse: the tap's reader of the frontend protocol takes any bytes
// without panicking, and reads a stream the same whatever pieces it comes
// in, as TCP may cut it anywhere.
func FuzzTapParse(f *testing.F) {
	f.Add(frontend(byte('Q'), "BEGIN\x00", byte('P'), "s1\x00SELECT 1\x00\x00\x00", byte('B'), "\x00s1\x00\x00\x00\x00\x00\x00\x00", byte('E'), "\x00\x00\x00\x00\x00", byte('S'), ""), uint16(7))
	f.Add(frontend(byte('Q'), "COMMIT\x00"), uint16(13))
	f.Add(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 8), sslRequestCode), uint16(3))
	f.Add([]byte{0, 0, 0, 2, 'Q', 0xff, 0xff, 0xff, 0xff}, uint16(1))
	f.Add([]byte{0, 0, 0, 8, 0, 3, 0, 0, 'Q', 0, 0, 0, 1}, uint16(9))
	f.Fuzz(func(t *testing.T, stream []byte, cut uint16) {
		whole := &tapConn{stmts: map[string]string{}}
		var bw burst
		whole.parse(stream, &bw)

		pieces := &tapConn{stmts: map[string]string{}}
		var bp burst
		at := int(cut) % (len(stream) + 1)
		pieces.parse(stream[:at], &bp)
		pieces.parse(stream[at:], &bp)

		if !reflect.DeepEqual(bw, bp) {
			t.Fatalf("cut at %d: read %+v, whole %+v", at, bp, bw)
		}
		if whole.started != pieces.started || whole.left != pieces.left || !reflect.DeepEqual(whole.stmts, pieces.stmts) {
			t.Fatalf("cut at %d: state differs", at)
		}
		if len(whole.body) > 1<<20 {
			t.Fatalf("kept %d bytes of one message", len(whole.body))
		}
	})
}
