package rollout

import "bytes"

// testKey is the record key of the tests' releases: a Release a test builds again for the same
// release (as Terraform passes its private state to every call) verifies the records the
// earlier ones wrote.
var testKey = bytes.Repeat([]byte{0x5e}, SealKeySize)

// testSeal is a release's seal as Terraform's private state would hold it before its first apply.
func testSeal() *Seal { return &Seal{Key: testKey} }
