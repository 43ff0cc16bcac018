package rollout

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
)

// testKey is the record key of the tests' releases: a Release a test builds again for the same
// release (as Terraform passes its private state to every call) verifies the records the
// earlier ones wrote.
var testKey = bytes.Repeat([]byte{0x5e}, SealKeySize)

// testSeal is a release's seal as Terraform's private state would hold it before its first apply.
func testSeal() *Seal { return &Seal{Key: testKey} }

// A seal prints without its key, with any verb.
func TestSealPrintsWithoutItsKey(t *testing.T) {
	s := &Seal{Key: testKey, Sequence: 7}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x"} {
		for _, v := range []any{s, *s, Release{Seal: s}} {
			got := fmt.Sprintf(verb, v)
			if strings.Contains(got, hex.EncodeToString(testKey)) || strings.Contains(got, "94 94") || strings.Contains(got, string(testKey)) || strings.Contains(got, "[94") {
				t.Errorf("%s of %T prints the key: %s", verb, v, got)
			}
		}
	}
}
