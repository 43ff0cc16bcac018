package provider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"reflect"

	"github.com/hashicorp/terraform-plugin-framework/diag"
)

// Each resource instance carries an identity in its private state, which the cluster's record
// of the release names as its owner: an instance that no longer owns the release (a deposed
// create_before_destroy original, a module moved without a moved block, another
// configuration) never dismantles it.

const privateInstanceKey = "instance"

// privateState is what Create, Update, Read and ImportState get and set private data through.
type privateState interface {
	GetKey(ctx context.Context, key string) ([]byte, diag.Diagnostics)
	SetKey(ctx context.Context, key string, value []byte) diag.Diagnostics
}

func newInstanceID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// instanceOf is the instance's identity; empty for an instance made before identities existed.
func instanceOf(ctx context.Context, p privateState, diags *diag.Diagnostics) string {
	if absent(p) {
		return ""
	}
	raw, d := p.GetKey(ctx, privateInstanceKey)
	diags.Append(d...)
	var id string
	if len(raw) > 0 && json.Unmarshal(raw, &id) != nil {
		return ""
	}
	return id
}

func setInstance(ctx context.Context, p privateState, id string) diag.Diagnostics {
	if absent(p) || id == "" {
		return nil
	}
	raw, _ := json.Marshal(id)
	return p.SetKey(ctx, privateInstanceKey, raw)
}

// absent reports a private state the caller has none of (a nil pointer in the interface): the
// framework always passes one, tests that call the methods directly may not.
func absent(p privateState) bool {
	return p == nil || reflect.ValueOf(p).IsNil()
}
