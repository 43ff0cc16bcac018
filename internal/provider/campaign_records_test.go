package provider

// Out-of-band rewrites of the release's record (issue 32 item 4): someone who may write the
// state ConfigMap rewrites what it says was promoted, or puts back a copy of it taken earlier
// (a replay, its MAC intact). The record is sealed with a key the Terraform state holds
// (record_seal.go), so neither may lead to a promotion without analysis: clause 2 judges
// every primary restart as before, and the convergence that the release recovers.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// Record tampering a schedule does, besides oobRewriteRecord (the rejected revision made the
// last promoted one).
const (
	// oobPromoteCanaryRecord: the record says the template under analysis was promoted.
	oobPromoteCanaryRecord outOfBand = "state ConfigMap's lastPromotedSpec rewritten to the canary's template"
	// oobReplayRecord: an earlier copy of the state ConfigMap's data is put back.
	oobReplayRecord outOfBand = "state ConfigMap's record replaced by an earlier copy"
)

var recordTampering = []outOfBand{oobRewriteRecord, oobPromoteCanaryRecord, oobReplayRecord}

// recordCopies keeps the copies of the record a replay may put back.
type recordCopies struct {
	mu     sync.Mutex
	copies []map[string]string
}

// keep takes a copy of what a run wrote, when it differs from the last one.
func (r *recordCopies) keep(ch apiChange) {
	cm, ok := ch.after.(*corev1.ConfigMap)
	if ch.by == harnessWriter || !ok || cm.Name != rollout.StateConfigMapName(campaignRelease) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.copies); n > 0 && maps.Equal(r.copies[n-1], cm.Data) {
		return
	}
	r.copies = append(r.copies, maps.Clone(cm.Data))
	if len(r.copies) > 16 {
		r.copies = r.copies[1:]
	}
}

// older is a copy other than the latest, picked by coin; nil when there is none.
func (r *recordCopies) older(coin float64) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.copies) < 2 {
		return nil
	}
	return maps.Clone(r.copies[int(coin*float64(len(r.copies)-1))])
}

// tamperBetweenApplies rewrites or replays the record before one command in six.
func (c *campaign) tamperBetweenApplies(ctx context.Context, process string) {
	if keyedCoin(c.seed, "record tampering before "+process) < 1.0/6 {
		c.tamperRecord(ctx, "before "+process)
	}
}

// tamperAtRequest rewrites or replays the record at a random request of one command in eight.
func (c *campaign) tamperAtRequest(f *processFaults, at string) {
	if c.converging() || keyedCoin(c.seed, "record tampering command "+f.process) >= 1.0/8 {
		return
	}
	if _, due := c.fire(f.process, "record tampering", at, 15); due {
		c.tamperRecord(context.Background(), f.process+" at "+at)
	}
}

func (c *campaign) tamperRecord(ctx context.Context, when string) {
	kind := recordTampering[int(keyedCoin(c.seed, "record tampering kind "+when)*float64(len(recordTampering)))%len(recordTampering)]
	c.outOfBand(ctx, kind, when)
}

// rewriteRecordToCanary makes the record say that the template under analysis was promoted,
// leaving its MAC and sequence as they were.
func (c *campaign) rewriteRecordToCanary(ctx context.Context) error {
	return c.editRecord(ctx, func(data map[string]string) error {
		var st map[string]any
		if err := json.Unmarshal([]byte(data["status.json"]), &st); err != nil {
			return err
		}
		applied, _ := st["lastAppliedSpec"].(string)
		if applied == "" || applied == st["lastPromotedSpec"] {
			return fmt.Errorf("the record holds no template under analysis")
		}
		st["lastPromotedSpec"], st["passedSpec"], st["rejected"], st["failedChecks"] = applied, applied, nil, 0
		b, err := json.Marshal(st)
		data["status.json"] = string(b)
		return err
	})
}

// replayRecord puts back an earlier copy of the record, MAC and all.
func (c *campaign) replayRecord(ctx context.Context, when string) error {
	earlier := c.records.older(keyedCoin(c.seed, "replayed copy "+when))
	if earlier == nil {
		return fmt.Errorf("no earlier record to replay")
	}
	return c.editRecord(ctx, func(data map[string]string) error {
		clear(data)
		maps.Copy(data, earlier)
		return nil
	})
}

// editRecord changes the state ConfigMap's data as kubectl edit does.
func (c *campaign) editRecord(ctx context.Context, change func(map[string]string) error) error {
	cms := c.harness.kube.CoreV1().ConfigMaps(campaignNamespace)
	cm, err := cms.Get(ctx, rollout.StateConfigMapName(campaignRelease), metav1.GetOptions{})
	if err != nil {
		return err
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	if err := change(cm.Data); err != nil {
		return err
	}
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "kubectl-edit"})
	return err
}

// following is an API server's onChange that keeps copies of the record, then calls next.
func (r *recordCopies) following(next func(apiChange)) func(apiChange) {
	return func(ch apiChange) {
		r.keep(ch)
		next(ch)
	}
}

// noteRecordWriter notes whether the record (the state ConfigMap's data) was last written by a
// run or by the schedule (a rewrite, a replay); the controls' annotations are no record.
func (c *campaign) noteRecordWriter(ch apiChange) {
	after, _ := ch.after.(*corev1.ConfigMap)
	if after == nil || after.Name != rollout.StateConfigMapName(campaignRelease) {
		return
	}
	before, _ := ch.before.(*corev1.ConfigMap)
	if before != nil && maps.Equal(before.Data, after.Data) {
		return
	}
	c.mu.Lock()
	c.forgedRecord = ch.by == harnessWriter
	c.mu.Unlock()
}

// recordForged reports a record the schedule wrote since the last run's write.
func (c *campaign) recordForged() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.forgedRecord
}
