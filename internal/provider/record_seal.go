package provider

import (
	"context"
	"encoding/json"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// The key that signs the release's cluster record, and the sequence of the last record write
// this instance saw, live only in the instance's private state (rollout/seal.go): never in
// the configuration, the plan, the cluster, Events or logs. The instance id cannot serve as
// the key: the record publishes it as the owner.

const privateSealKey = "record_seal"

// savedSeal is the private state's form of a rollout.Seal.
type savedSeal struct {
	Key      []byte `json:"key"`
	Sequence uint64 `json:"sequence"`
}

// sealOf is the instance's seal; nil when its private state holds none (an import, an instance
// made before records were signed, one added again after terraform state rm).
func sealOf(ctx context.Context, p privateState, diags *diag.Diagnostics) *rollout.Seal {
	if absent(p) {
		return nil
	}
	raw, d := p.GetKey(ctx, privateSealKey)
	diags.Append(d...)
	var s savedSeal
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil || len(s.Key) != rollout.SealKeySize {
		return nil
	}
	return &rollout.Seal{Key: s.Key, Sequence: s.Sequence}
}

// sealOrNew is the instance's seal, or a new key when it holds none: the record is then
// unverifiable once, and signed with the new key from this call on.
func sealOrNew(ctx context.Context, p privateState, diags *diag.Diagnostics) *rollout.Seal {
	if s := sealOf(ctx, p, diags); s != nil {
		return s
	}
	s, err := rollout.NewSeal()
	if err != nil {
		diags.AddError("canary_release record key", err.Error())
		return nil
	}
	return s
}

// setSeal saves the key and the sequence the engine reached, whatever the call's outcome.
func setSeal(ctx context.Context, p privateState, s *rollout.Seal) diag.Diagnostics {
	if absent(p) || s == nil {
		return nil
	}
	raw, _ := json.Marshal(savedSeal{Key: s.Key, Sequence: s.Sequence})
	return p.SetKey(ctx, privateSealKey, raw)
}
