package provider

// Terraform's side of the campaign: each simulated process is a configured ReleaseResource,
// and the schedule calls its methods as terraform-plugin-framework does for Terraform core:
// refresh (Read), plan (ModifyPlan, on a planned value with the schema's defaults), apply
// (Create, Update or Delete) and import (ImportState, then Read), with the private state
// carried from one call to the next. Going through the framework's protocol server costs some
// 10 ms per call on this schema, which would make the campaign ten times slower; the protocol
// server still plans each configuration structure once, which gives the defaults and validates it.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"unsafe"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	resourceschema "github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

const releaseTypeName = "canary_release"

// releaseSchema is the resource's schema and Terraform type, built once per test binary.
var releaseSchema = sync.OnceValues(func() (resourceschema.Schema, tftypes.Object) {
	var resp resource.SchemaResponse
	(&ReleaseResource{}).Schema(context.Background(), resource.SchemaRequest{}, &resp)
	return resp.Schema, resp.Schema.Type().TerraformType(context.Background()).(tftypes.Object)
})

func nullRelease() tftypes.Value {
	_, typ := releaseSchema()
	return tftypes.NewValue(typ, nil)
}

// instanceState is one resource instance in the Terraform state, with its private state.
type instanceState struct {
	value   tftypes.Value
	private map[string][]byte
}

// providerProcess is a provider process serving one Terraform command.
type providerProcess struct {
	resource *ReleaseResource
	sim      *simulatedProcess
	faults   *processFaults
}

// startProviderProcess starts a provider process on machine whose requests meet plan's
// faults; ctx is its run context, cancelled by a kill.
func (c *campaign) startProviderProcess(ctx context.Context, name string, machine *simulatedMachine, plan faultPlan) (*providerProcess, context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	faults := c.newProcessFaults(name, plan)
	faults.cancel, faults.machine = cancel, machine
	sim := c.server.newProcess(name, faults)
	sim.machine = machine
	webhooks := &http.Client{Transport: simulatedWebhooks{delay: c.shape.eventSinkDelay, calling: c.callingWebhook}}
	cl := &clients{
		kube: sim.kube, leases: sim.kube, lockMachine: machine, dynamic: sim.dynamic, http: webhooks, insecureHTTP: webhooks,
		templates: c.metricTemplates(),
	}
	r := &ReleaseResource{}
	r.Configure(ctx, resource.ConfigureRequest{ProviderData: cl}, &resource.ConfigureResponse{})
	return &providerProcess{resource: r, sim: sim, faults: faults}, ctx, cancel
}

// diagnosticsError joins the error diagnostics; nil when there are none.
func diagnosticsError(diags diag.Diagnostics) error {
	var lines []string
	for _, d := range diags.Errors() {
		lines = append(lines, d.Summary()+": "+d.Detail())
	}
	if len(lines) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(lines, "; "))
}

// warningsText joins the warnings, summary and detail, for the trace.
func warningsText(diags diag.Diagnostics) string {
	var out []string
	for _, d := range diags.Warnings() {
		out = append(out, d.Summary()+": "+d.Detail())
	}
	return strings.Join(out, "; ")
}

// withPrivate fills the Private field of a request or response (a *privatestate.ProviderData,
// a type internal to the framework) with data, as the framework does from the state.
func withPrivate(ctx context.Context, message any, data map[string][]byte) {
	field := reflect.ValueOf(message).Elem().FieldByName("Private")
	private := reflect.New(field.Type().Elem())
	setter := private.Interface().(interface {
		SetKey(context.Context, string, []byte) diag.Diagnostics
	})
	for key, value := range data {
		setter.SetKey(ctx, key, value)
	}
	field.Set(private)
}

// privateOf reads what the resource left in a response's Private field.
func privateOf(message any) map[string][]byte {
	private := reflect.ValueOf(message).Elem().FieldByName("Private")
	if private.IsNil() {
		return nil
	}
	data := private.Elem().FieldByName("data")
	data = reflect.NewAt(data.Type(), unsafe.Pointer(data.UnsafeAddr())).Elem()
	return maps.Clone(data.Interface().(map[string][]byte))
}

// refresh is Terraform's refresh of one instance; gone reports that Read removed it.
func (p *providerProcess) refresh(ctx context.Context, st instanceState) (instanceState, bool, error) {
	s, _ := releaseSchema()
	req := resource.ReadRequest{State: tfsdk.State{Schema: s, Raw: st.value}}
	resp := resource.ReadResponse{State: tfsdk.State{Schema: s, Raw: st.value}}
	withPrivate(ctx, &req, st.private)
	withPrivate(ctx, &resp, st.private)
	p.resource.Read(ctx, req, &resp)
	if err := diagnosticsError(resp.Diagnostics); err != nil {
		return st, false, err
	}
	return instanceState{value: resp.State.Raw, private: privateOf(&resp)}, resp.State.Raw.IsNull(), nil
}

// plannedChange is what a plan proposes for one instance.
type plannedChange struct {
	planned  tftypes.Value
	private  map[string][]byte
	warnings string
}

// noChange reports a plan that leaves the instance as it is.
func (pc plannedChange) noChange(prior tftypes.Value) bool { return pc.planned.Equal(prior) }

// plan is Terraform's plan of one instance towards config, whose defaults are in withDefaults:
// what the configuration does not set keeps its prior value while nothing changes (id always
// does), and turns unknown with any change; then the resource's ModifyPlan.
func (p *providerProcess) plan(ctx context.Context, prior *instanceState, config, withDefaults tftypes.Value) (plannedChange, error) {
	s, _ := releaseSchema()
	planned, priorValue, priorPrivate := withDefaults, nullRelease(), map[string][]byte(nil)
	if prior != nil {
		priorValue, priorPrivate = prior.value, prior.private
		unchanged, err := withAttributes(planned, priorValue, "id", "status", "rollout_plan", "last_run")
		if err != nil {
			return plannedChange{}, err
		}
		if unchanged.Equal(priorValue) {
			planned = unchanged
		} else if planned, err = withAttributes(planned, priorValue, "id"); err != nil {
			return plannedChange{}, err
		}
	}
	req := resource.ModifyPlanRequest{
		Config: tfsdk.Config{Schema: s, Raw: config}, State: tfsdk.State{Schema: s, Raw: priorValue}, Plan: tfsdk.Plan{Schema: s, Raw: planned},
	}
	resp := resource.ModifyPlanResponse{Plan: req.Plan}
	withPrivate(ctx, &req, priorPrivate)
	withPrivate(ctx, &resp, priorPrivate)
	p.resource.ModifyPlan(ctx, req, &resp)
	if err := diagnosticsError(resp.Diagnostics); err != nil {
		return plannedChange{}, err
	}
	return plannedChange{planned: resp.Plan.Raw, private: privateOf(&resp), warnings: warningsText(resp.Diagnostics)}, nil
}

// withAttributes is v with some top-level attributes taken from from.
func withAttributes(v, from tftypes.Value, names ...string) (tftypes.Value, error) {
	var attrs, fromAttrs map[string]tftypes.Value
	if err := v.As(&attrs); err != nil {
		return v, err
	}
	if err := from.As(&fromAttrs); err != nil {
		return v, err
	}
	out := maps.Clone(attrs)
	for _, name := range names {
		out[name] = fromAttrs[name]
	}
	return tftypes.NewValue(v.Type(), out), nil
}

// apply is Terraform's apply of a planned change: Create (no prior), Update, or Delete (a null
// planned value). It returns the new state: null after a Delete, and after a Create that
// failed; the prior one after a Delete that failed.
func (p *providerProcess) apply(ctx context.Context, prior *instanceState, change plannedChange, config tftypes.Value) (instanceState, string, error) {
	s, _ := releaseSchema()
	switch {
	case prior == nil:
		req := resource.CreateRequest{Config: tfsdk.Config{Schema: s, Raw: config}, Plan: tfsdk.Plan{Schema: s, Raw: change.planned}}
		resp := resource.CreateResponse{State: tfsdk.State{Schema: s, Raw: nullRelease()}}
		withPrivate(ctx, &resp, change.private)
		p.resource.Create(ctx, req, &resp)
		return instanceState{value: resp.State.Raw, private: privateOf(&resp)}, warningsText(resp.Diagnostics), diagnosticsError(resp.Diagnostics)
	case change.planned.IsNull():
		req := resource.DeleteRequest{State: tfsdk.State{Schema: s, Raw: prior.value}}
		resp := resource.DeleteResponse{State: tfsdk.State{Schema: s, Raw: prior.value}}
		withPrivate(ctx, &req, prior.private)
		withPrivate(ctx, &resp, prior.private)
		p.resource.Delete(ctx, req, &resp)
		if err := diagnosticsError(resp.Diagnostics); err != nil {
			return *prior, warningsText(resp.Diagnostics), err
		}
		return instanceState{value: nullRelease()}, warningsText(resp.Diagnostics), nil
	}
	req := resource.UpdateRequest{Config: tfsdk.Config{Schema: s, Raw: config}, Plan: tfsdk.Plan{Schema: s, Raw: change.planned},
		State: tfsdk.State{Schema: s, Raw: prior.value}}
	resp := resource.UpdateResponse{State: tfsdk.State{Schema: s, Raw: nullRelease()}}
	withPrivate(ctx, &req, change.private)
	withPrivate(ctx, &resp, change.private)
	p.resource.Update(ctx, req, &resp)
	return instanceState{value: resp.State.Raw, private: privateOf(&resp)}, warningsText(resp.Diagnostics), diagnosticsError(resp.Diagnostics)
}

// importState is `terraform import`: ImportState, then the refresh Terraform runs.
func (p *providerProcess) importState(ctx context.Context, id string) (instanceState, error) {
	s, _ := releaseSchema()
	resp := resource.ImportStateResponse{State: tfsdk.State{Schema: s, Raw: nullRelease()}}
	withPrivate(ctx, &resp, nil)
	p.resource.ImportState(ctx, resource.ImportStateRequest{ID: id}, &resp)
	if err := diagnosticsError(resp.Diagnostics); err != nil {
		return instanceState{}, err
	}
	st, gone, err := p.refresh(ctx, instanceState{value: resp.State.Raw, private: privateOf(&resp)})
	if err == nil && gone {
		err = fmt.Errorf("import of %s found nothing to import", id)
	}
	return st, err
}

// plannedDefaults caches, per configuration structure, the planned value of a create as the
// framework computes it (defaults applied, computed attributes unknown); nil clients keep
// ModifyPlan out of it.
var plannedDefaults sync.Map // structureOf(config) → plannedShape

type plannedShape struct {
	planned tftypes.Value
	err     error
}

// planShape plans a configuration of each structure once through the framework's protocol
// server: it validates the configuration and returns the planned value of its create.
func planShape(ctx context.Context, configJSON []byte) (tftypes.Value, error) {
	key, err := structureOf(configJSON)
	if err != nil {
		return tftypes.Value{}, err
	}
	if cached, ok := plannedDefaults.Load(key); ok {
		return cached.(plannedShape).planned, cached.(plannedShape).err
	}
	planned, err := planThroughProtocol(ctx, configJSON)
	plannedDefaults.Store(key, plannedShape{planned: planned, err: err})
	return planned, err
}

// structureOf is a configuration with every scalar replaced by its type's zero: the schema's
// defaults and the computed attributes depend on which attributes are set, not on their values.
func structureOf(configJSON []byte) (string, error) {
	var config any
	if err := json.Unmarshal(configJSON, &config); err != nil {
		return "", err
	}
	var zero func(v any) any
	zero = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				v[k] = zero(e)
			}
			return v
		case []any:
			for i, e := range v {
				v[i] = zero(e)
			}
			return v
		case string:
			return ""
		case float64:
			return 0
		case bool:
			return false
		}
		return v
	}
	out, err := json.Marshal(zero(config))
	return string(out), err
}

// withPlannedDefaults is config with each null attribute taken from planned, the planned create
// of a configuration of the same structure: the schema's defaults, and unknown computed values.
func withPlannedDefaults(config, planned tftypes.Value) (tftypes.Value, error) {
	return tftypes.Transform(config, func(at *tftypes.AttributePath, v tftypes.Value) (tftypes.Value, error) {
		if !v.IsNull() {
			return v, nil
		}
		if found, _, err := tftypes.WalkAttributePath(planned, at); err == nil {
			if pv, ok := found.(tftypes.Value); ok {
				return pv, nil
			}
		}
		return v, nil
	})
}

func planThroughProtocol(ctx context.Context, configJSON []byte) (tftypes.Value, error) {
	s, typ := releaseSchema()
	config, err := valueFromJSON(configJSON, typ)
	if err != nil {
		return tftypes.Value{}, err
	}
	server := providerserver.NewProtocol6(&campaignProvider{})()
	empty := tftypes.Object{AttributeTypes: map[string]tftypes.Type{}}
	providerConfig, err := tfprotov6.NewDynamicValue(empty, tftypes.NewValue(empty, map[string]tftypes.Value{}))
	if err != nil {
		return tftypes.Value{}, err
	}
	if _, err := server.ConfigureProvider(ctx, &tfprotov6.ConfigureProviderRequest{Config: &providerConfig}); err != nil {
		return tftypes.Value{}, err
	}
	encoded, err := tfprotov6.NewDynamicValue(typ, config)
	if err != nil {
		return tftypes.Value{}, err
	}
	validated, err := server.ValidateResourceConfig(ctx, &tfprotov6.ValidateResourceConfigRequest{TypeName: releaseTypeName, Config: &encoded})
	if err != nil {
		return tftypes.Value{}, err
	}
	if err := protocolError(validated.Diagnostics); err != nil {
		return tftypes.Value{}, fmt.Errorf("the campaign's configuration is invalid: %w", err)
	}
	proposed, err := proposedNewState(ctx, s, tftypes.NewValue(typ, nil), config)
	if err != nil {
		return tftypes.Value{}, err
	}
	proposedValue, err := tfprotov6.NewDynamicValue(typ, proposed)
	if err != nil {
		return tftypes.Value{}, err
	}
	prior, err := tfprotov6.NewDynamicValue(typ, tftypes.NewValue(typ, nil))
	if err != nil {
		return tftypes.Value{}, err
	}
	resp, err := server.PlanResourceChange(ctx, &tfprotov6.PlanResourceChangeRequest{
		TypeName: releaseTypeName, PriorState: &prior, ProposedNewState: &proposedValue, Config: &encoded,
	})
	if err != nil {
		return tftypes.Value{}, err
	}
	if err := protocolError(resp.Diagnostics); err != nil {
		return tftypes.Value{}, err
	}
	return resp.PlannedState.Unmarshal(typ)
}

func protocolError(diags []*tfprotov6.Diagnostic) error {
	var lines []string
	for _, d := range diags {
		if d.Severity == tfprotov6.DiagnosticSeverityError {
			lines = append(lines, d.Summary+": "+d.Detail)
		}
	}
	if len(lines) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(lines, "; "))
}

// proposedNewState is Terraform core's proposed new state: the configuration, with each
// computed attribute the configuration leaves null taken from the prior state (unknown on a
// create), as objchange.ProposedNew does.
func proposedNewState(ctx context.Context, s resourceschema.Schema, prior, config tftypes.Value) (tftypes.Value, error) {
	return tftypes.Transform(config, func(at *tftypes.AttributePath, v tftypes.Value) (tftypes.Value, error) {
		if !v.IsNull() || len(at.Steps()) == 0 || !computedAttribute(ctx, s, at) {
			return v, nil
		}
		if !prior.IsNull() {
			if found, _, err := tftypes.WalkAttributePath(prior, at); err == nil {
				if pv, ok := found.(tftypes.Value); ok {
					return pv, nil
				}
			}
		}
		return tftypes.NewValue(v.Type(), tftypes.UnknownValue), nil
	})
}

// computedAttribute reports an attribute that Terraform may fill when the configuration does
// not (a path that names no attribute, such as a list element, is none).
func computedAttribute(ctx context.Context, s resourceschema.Schema, at *tftypes.AttributePath) bool {
	a, err := s.AttributeAtTerraformPath(ctx, at)
	return err == nil && a.IsComputed()
}

// campaignProvider is the provider whose resources get no clients: it only plans shapes.
type campaignProvider struct{}

func (p *campaignProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "canary"
}

func (p *campaignProvider) Schema(context.Context, provider.SchemaRequest, *provider.SchemaResponse) {
}

func (p *campaignProvider) Configure(context.Context, provider.ConfigureRequest, *provider.ConfigureResponse) {
}

func (p *campaignProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{NewReleaseResource}
}

func (p *campaignProvider) DataSources(context.Context) []func() datasource.DataSource { return nil }
