package provider

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// A long run keeps its first and last lines, says how many it left out between them, masks
// the configured secrets and leaves out the DEBUG query lines.
func TestRunStoryKeepsHeadAndTailAndMasksSecrets(t *testing.T) {
	s := newRunStory([]string{"s3cret"})
	total := storyHeadLines + storyTailLines + 25
	for i := range total {
		s.record(rollout.Progress{Kind: rollout.ProgressNote, Message: fmt.Sprintf("line %d token s3cret", i)})
		s.record(rollout.Progress{Kind: rollout.ProgressQuery, Message: "query text"})
	}
	lines := strings.Split(s.String(), "\n")
	if len(lines) != storyHeadLines+1+storyTailLines {
		t.Fatalf("%d lines, want %d", len(lines), storyHeadLines+1+storyTailLines)
	}
	if !strings.HasSuffix(lines[0], "line 0 token ***") || !strings.HasSuffix(lines[storyHeadLines-1], fmt.Sprintf("line %d token ***", storyHeadLines-1)) {
		t.Errorf("head %q … %q", lines[0], lines[storyHeadLines-1])
	}
	if lines[storyHeadLines] != "… 25 lines left out …" {
		t.Errorf("gap line %q", lines[storyHeadLines])
	}
	if last := lines[len(lines)-1]; !strings.HasSuffix(last, fmt.Sprintf("line %d token ***", total-1)) {
		t.Errorf("last line %q", last)
	}
	if first := lines[storyHeadLines+1]; !strings.HasSuffix(first, fmt.Sprintf("line %d token ***", storyHeadLines+25)) {
		t.Errorf("first line of the tail %q", first)
	}
	if strings.Contains(s.String(), "s3cret") || strings.Contains(s.String(), "query text") {
		t.Error("the story holds a secret or a DEBUG line")
	}
}

// The story of a run is in Terraform's own output, with no terminal: last_run shows every step
// of a promotion with its checks, and the error of a rolled-back run ends with its story.
func TestAccRelease_lastRun(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	line := func(text string) string { return `(?m)^\+\d+s ` + text + `$` }
	var promoted []*regexp.Regexp
	for w := 10; w <= 50; w += 10 {
		promoted = append(promoted, regexp.MustCompile(line(fmt.Sprintf("canary weight %d%%", w))))
	}
	promoted = append(promoted,
		regexp.MustCompile(line(`metric request-success-rate = 100\.00, within threshold_range \[min 99\]`)),
		regexp.MustCompile(line(`metric request-duration = [\d.]+, within threshold_range \[max 500\]`)),
		regexp.MustCompile(line(`Succeeded: .*`)))
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: releaseConfig(ns, manifestWorkload("podinfo:6.0.0", "0"), healthyAnalysis, "")},
			{
				PreConfig: func() { c.setServiceAnnotation(t, ns, "podinfo", "sim.canary-release.dev/rps", "200") },
				Config:    releaseConfig(ns, manifestWorkload("podinfo:6.0.1", "0"), healthyAnalysis, ""),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Succeeded"),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					resource.TestCheckResourceAttrWith(addr, "last_run", func(story string) error {
						for _, want := range promoted {
							if !want.MatchString(story) {
								return fmt.Errorf("last_run does not match %s:\n%s", want, story)
							}
						}
						return nil
					}),
				),
			},
			{
				Config:      releaseConfig(ns, manifestWorkload("podinfo:6.0.2", "0.5"), healthyAnalysis, ""),
				ExpectError: wrappedPattern(`Rolled back at canary weight 10%[\s\S]*The run:[\s\S]*canary weight 10%[\s\S]*request-success-rate[\s\S]*Failed:`),
			},
		},
	})
}
