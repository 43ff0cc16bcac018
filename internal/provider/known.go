package provider

import "github.com/canary-release/terraform-provider-canary/internal/tfschema"

// The provider reads framework values with the helpers it shares with the mesh drivers.
var (
	// errUnknown marks a value that is not known yet (plan time): callers skip what they
	// cannot check instead of failing.
	errUnknown = tfschema.ErrUnknown
	// decode reads a nested object into target: false for a null object, errUnknown when
	// anything in it is unknown.
	decode = tfschema.Decode
	// decodeElements reads a list or a map into target (a slice or a map).
	decodeElements = tfschema.DecodeElements
	diagErr        = tfschema.DiagErr
	// prefixed names the attribute an error is about; nil stays nil.
	prefixed = tfschema.Prefixed
)
