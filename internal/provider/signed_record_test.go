package provider

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// Issue 32, hole 5, under Terraform: after a revision was rejected, someone who may write
// ConfigMaps rewrote the record to say it was promoted. The next unattended apply (refresh,
// plan, apply, with the instance's private state) said "nothing to release" and gave it all
// the traffic. Now the refresh keeps what the Terraform state says was promoted, the apply
// refuses the revision (here: analyses it, as the rejection was rewritten away too), and a
// warning says the record could not be verified.
func TestRewrittenRecordIsNotTrustedUnderTerraform(t *testing.T) {
	for _, c := range []struct {
		then opKind
		// why is the warning's reason: a MAC under another key, or no key in the state.
		why string
	}{
		{opReapply, "its MAC does not match"},
		{opImport, "the Terraform state holds no key"},
		{opLoseState, "the Terraform state holds no key"},
	} {
		t.Run(string(c.then), func(t *testing.T) { rewrittenRecordThen(t, c.then, c.why) })
	}
}

// rewrittenRecordThen rejects a revision, rewrites the record, then runs then.
func rewrittenRecordThen(t *testing.T, then opKind, why string) {
	synctest.Test(t, func(t *testing.T) {
		// A seed whose keyed coins draw no control or autoscaler event: this test is about the
		// rewritten record alone (seed 32 came to draw an operator's promote-now, which may
		// legitimately promote the revision, and seed 2 a moment's fault once the campaign drew
		// faults at more moments).
		s := campaignSchedule{seed: 3, shape: releaseShape{router: "osm", strategy: strategyCanary, steps: []int{30}, threshold: 1, iterations: 2, revertOnDeletion: true},
			ops: []campaignOp{
				{kind: opCreate},
				{kind: opNewTemplate, bad: true},
				{kind: then, before: []outOfBand{oobRewriteRecord}},
			}}
		c := newCampaign(s)
		ctx := context.Background()
		if err := c.setUpCluster(ctx); err != nil {
			t.Fatal(err)
		}
		for i, op := range s.ops {
			c.runOperation(ctx, i+1, op)
			c.otherHosts.Wait()
		}
		trace := strings.Join(c.trace, "\n")
		if !strings.Contains(trace, "out of band, before command 3: "+string(oobRewriteRecord)) {
			t.Fatalf("the record was not rewritten:\n%s", trace)
		}
		if got := c.running(campaignPrimary); got != "podinfo:v1-good" {
			t.Errorf("the primary runs %s, want podinfo:v1-good: the rejected revision took the traffic\n%s", got, trace)
		}
		for _, want := range []string{
			"command 3: warnings: canary_release record not trusted: the cluster's record of canary_release " + campaignNamespace + "/" + campaignRelease + " could not be verified (" + why,
			"it is not trusted; the target's template goes through the analysis",
			"check of podinfo:v2-bad: 50",
			"command 3: failed: Canary release failed: Canary analysis failed",
		} {
			if !strings.Contains(trace[strings.Index(trace, "== command 3"):], want) {
				t.Errorf("command 3's trace does not say %q:\n%s", want, trace)
			}
		}
		if strings.Contains(trace, "nothing to release") {
			t.Errorf("the rewritten record was trusted:\n%s", trace)
		}
		checkSealKept(t, c)
		c.judge.mu.Lock()
		for _, v := range c.judge.violations {
			t.Errorf("violation: %s", v)
		}
		c.judge.mu.Unlock()
		// What a command left running dies with its process: let its timers run out.
		time.Sleep(time.Hour)
	})
}

// checkSealKept checks the key and the sequence in the instance's private state: the sequence
// is the record's (a failed apply saves it too), and the key is nowhere in the cluster.
func checkSealKept(t *testing.T, c *campaign) {
	t.Helper()
	if c.ws.state == nil {
		return // a failed create saves no state
	}
	var saved savedSeal
	if err := json.Unmarshal(c.ws.state.private[privateSealKey], &saved); err != nil || len(saved.Key) != rollout.SealKeySize {
		t.Fatalf("private state %q: %v; want a 32-byte key", c.ws.state.private[privateSealKey], err)
	}
	ctx := context.Background()
	cm, err := c.observer.kube.CoreV1().ConfigMaps(campaignNamespace).Get(ctx, rollout.StateConfigMapName(campaignRelease), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Data["sequence"]; got != strconv.FormatUint(saved.Sequence, 10) {
		t.Errorf("the record's sequence is %s, the private state's %d", got, saved.Sequence)
	}
	forms := []string{string(saved.Key), hex.EncodeToString(saved.Key), base64.StdEncoding.EncodeToString(saved.Key)}
	cms, _ := c.observer.kube.CoreV1().ConfigMaps(campaignNamespace).List(ctx, metav1.ListOptions{})
	events, _ := c.observer.kube.CoreV1().Events(campaignNamespace).List(ctx, metav1.ListOptions{})
	seen, _ := json.Marshal([]any{cms, events})
	for _, form := range forms {
		if strings.Contains(string(seen), form) || strings.Contains(strings.Join(c.trace, "\n"), form) {
			t.Errorf("the key is in the cluster's ConfigMaps or Events, or in the trace")
		}
	}
}
