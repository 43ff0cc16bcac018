package rollout

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// The cluster's record of a release (the state ConfigMap) is written ahead of the Terraform
// state, so a run trusts it over the Terraform state: it may be legitimately ahead after a
// killed apply. Anyone who may write ConfigMaps could then rewrite what was promoted. So the
// engine signs every record it writes: an HMAC-SHA256, under a key of the release's own that
// only Terraform's private state holds, over the stored bytes and a sequence number that
// grows with every write. A run trusts a record only when the MAC matches and its sequence
// is not older than the one Terraform last saved; untrusted.go says what it does otherwise.

// SealKeySize is the size of a record key, in bytes.
const SealKeySize = 32

// Seal is what signs a release's record: the key and the sequence of the last record write
// the caller knows of. The caller keeps both in Terraform's private state; the engine raises
// Sequence to the record it verified and to every record it writes, so the caller saves
// Sequence after each call, whatever its outcome.
type Seal struct {
	Key      []byte
	Sequence uint64
	// Fresh: the key was made for this call, as the Terraform state held none, so no record
	// in the cluster can have been signed with it.
	Fresh bool
}

// NewSeal makes a new random key, for a resource instance that has none: a create, an import,
// a resource added again after terraform state rm, an instance from before records were signed.
func NewSeal() (*Seal, error) {
	key := make([]byte, SealKeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("making the key that signs the release's record: %w", err)
	}
	return &Seal{Key: key, Fresh: true}, nil
}

// usable reports a seal with a key of the right size.
func (s *Seal) usable() bool { return s != nil && len(s.Key) == SealKeySize }

// sealed is what a record's MAC covers: the exact bytes stored, the release they belong to
// and the write's sequence.
type sealed struct {
	namespace, name, format string
	sequence                uint64
	status, spec            []byte
}

// mac is the record's HMAC-SHA256, hex. Every field is length-prefixed, so no two records
// share an input.
func (s *Seal) mac(rec sealed) string {
	h := hmac.New(sha256.New, s.Key)
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field([]byte("canary_release record"))
	field([]byte(rec.namespace))
	field([]byte(rec.name))
	field([]byte(rec.format))
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], rec.sequence)
	field(seq[:])
	field(rec.status)
	field(rec.spec)
	return hex.EncodeToString(h.Sum(nil))
}

// errNoKey is the reason a record cannot be verified when the resource holds no key.
var errNoKey = errors.New("the Terraform state holds no key for it: an import, a resource added again after terraform state rm, a create that stopped before Terraform saved it, " +
	"or the first apply after upgrading from a provider version that did not sign records")

// verify says why the record cannot be trusted; nil when it can.
func (s *Seal) verify(rec sealed, mac string) error {
	switch {
	case !s.usable() || s.Fresh:
		return errNoKey
	case mac == "":
		return errors.New("the record carries no MAC: it was written by a provider version that did not sign records, or by someone else")
	case !hmac.Equal([]byte(mac), []byte(s.mac(rec))):
		return errors.New("its MAC does not match: the record was changed by something other than this resource's runs, or written under another key")
	case rec.sequence < s.Sequence:
		return fmt.Errorf("its sequence %d is older than the last one this resource saved (%d): an older record was put back", rec.sequence, s.Sequence)
	}
	return nil
}

// Format prints a seal without its key, whatever the verb: a key in a log line or an error
// would let its reader sign records.
func (s Seal) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "rollout.Seal{Key: (%d bytes, not shown), Sequence: %d}", len(s.Key), s.Sequence)
}
