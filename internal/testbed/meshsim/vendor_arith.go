package meshsim

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// arith is a small arithmetic expression over named series and numbers (+ - * /, unary
// minus, parentheses), the part of CloudWatch metric math and of SignalFlow stream
// arithmetic the simulator speaks.
type arith interface {
	eval(lookup func(name string) (float64, bool)) (float64, bool)
	names() []string
}

type arithNum float64
type arithRef string
type arithNeg struct{ x arith }
type arithBin struct {
	op   byte
	l, r arith
}

func (n arithNum) eval(func(string) (float64, bool)) (float64, bool) { return float64(n), true }
func (arithNum) names() []string                                     { return nil }
func (n arithRef) eval(lookup func(string) (float64, bool)) (float64, bool) {
	return lookup(string(n))
}
func (n arithRef) names() []string { return []string{string(n)} }
func (n arithNeg) eval(lookup func(string) (float64, bool)) (float64, bool) {
	v, ok := n.x.eval(lookup)
	return -v, ok
}
func (n arithNeg) names() []string { return n.x.names() }

// eval leaves out a point whose divisor is 0, as the vendors do.
func (b arithBin) eval(lookup func(string) (float64, bool)) (float64, bool) {
	l, ok := b.l.eval(lookup)
	if !ok {
		return 0, false
	}
	r, ok := b.r.eval(lookup)
	if !ok {
		return 0, false
	}
	switch b.op {
	case '+':
		return l + r, true
	case '-':
		return l - r, true
	case '*':
		return l * r, true
	}
	if r == 0 {
		return 0, false
	}
	return l / r, true
}
func (b arithBin) names() []string { return append(b.l.names(), b.r.names()...) }

// parseArith parses an expression; operand parses what is not a number or a parenthesis
// (a name, or a whole SignalFlow stream), returning it and the rest of the text.
func parseArith(text string, operand func(s string) (arith, string, error)) (arith, error) {
	p := &arithParser{s: text, operand: operand}
	e, err := p.sum()
	if err != nil {
		return nil, err
	}
	if rest := strings.TrimSpace(p.s); rest != "" {
		return nil, fmt.Errorf("unexpected %q", rest)
	}
	return e, nil
}

type arithParser struct {
	s       string
	operand func(s string) (arith, string, error)
}

func (p *arithParser) peek() byte {
	p.s = strings.TrimLeftFunc(p.s, unicode.IsSpace)
	if p.s == "" {
		return 0
	}
	return p.s[0]
}

func (p *arithParser) sum() (arith, error) {
	l, err := p.product()
	for err == nil && (p.peek() == '+' || p.peek() == '-') {
		op := p.s[0]
		p.s = p.s[1:]
		var r arith
		if r, err = p.product(); err == nil {
			l = arithBin{op, l, r}
		}
	}
	return l, err
}

func (p *arithParser) product() (arith, error) {
	l, err := p.unary()
	for err == nil && (p.peek() == '*' || p.peek() == '/') {
		op := p.s[0]
		p.s = p.s[1:]
		var r arith
		if r, err = p.unary(); err == nil {
			l = arithBin{op, l, r}
		}
	}
	return l, err
}

func (p *arithParser) unary() (arith, error) {
	switch c := p.peek(); {
	case c == 0:
		return nil, fmt.Errorf("the expression ends too early")
	case c == '-':
		p.s = p.s[1:]
		x, err := p.unary()
		return arithNeg{x}, err
	case c == '(':
		p.s = p.s[1:]
		x, err := p.sum()
		if err != nil {
			return nil, err
		}
		if p.peek() != ')' {
			return nil, fmt.Errorf("missing )")
		}
		p.s = p.s[1:]
		return x, nil
	case c >= '0' && c <= '9' || c == '.':
		end := strings.IndexFunc(p.s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' && r != 'e' && r != 'E' })
		if end < 0 {
			end = len(p.s)
		}
		v, err := strconv.ParseFloat(p.s[:end], 64)
		if err != nil {
			return nil, fmt.Errorf("bad number %q", p.s[:end])
		}
		p.s = p.s[end:]
		return arithNum(v), nil
	}
	x, rest, err := p.operand(p.s)
	p.s = rest
	return x, err
}

// identOperand reads a name: letters, digits and underscores, starting with a letter.
func identOperand(s string) (arith, string, error) {
	end := strings.IndexFunc(s, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' })
	if end < 0 {
		end = len(s)
	}
	if end == 0 || !unicode.IsLetter(rune(s[0])) {
		return nil, s, fmt.Errorf("unexpected %q", s)
	}
	return arithRef(s[:end]), s[end:], nil
}
