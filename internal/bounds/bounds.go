// Package bounds is how a component's Config.Validate reports a field out
// of its bound: a *FieldError names the field (its Go name) and says the
// bound, so that the runner can name the flag that set the field instead
// (the bounds live in the components only; the flags only parse). It is a
// leaf: the standard library only.
package bounds

import (
	"errors"
	"fmt"
)

// FieldError is one field of a config out of its bound.
type FieldError struct {
	// Field is the field's Go name ("BatchSize").
	Field string
	// Rule says the bound, without the field's name or its value ("must
	// be between 1 and 10000").
	Rule string
	// Got is the value refused, as the error prints it ("0", "500µs").
	Got string
}

// Error is "<Field> <Rule> (got <Got>)".
func (e *FieldError) Error() string {
	if e.Got == "" {
		return e.Field + " " + e.Rule
	}
	return fmt.Sprintf("%s %s (got %s)", e.Field, e.Rule, e.Got)
}

// Errorf returns a *FieldError for field whose value got breaks the rule
// format (with args).
func Errorf(field string, got any, format string, args ...any) error {
	return &FieldError{Field: field, Rule: fmt.Sprintf(format, args...), Got: fmt.Sprint(got)}
}

// Rule returns a *FieldError for field with no value to print (a rule
// between fields, or about a value that cannot be printed).
func Rule(field, format string, args ...any) error {
	return &FieldError{Field: field, Rule: fmt.Sprintf(format, args...)}
}

// Fields returns the *FieldError values in err (joined or wrapped), in
// order; err's other errors are left out.
func Fields(err error) []*FieldError {
	fields, _ := split(err)
	return fields
}

// Others returns err's errors that are not a *FieldError, joined (nil when
// every one is).
func Others(err error) error {
	_, others := split(err)
	return errors.Join(others...)
}

// split walks err's tree (errors.Join's, then wrapping) into its field
// errors and the others.
func split(err error) (fields []*FieldError, others []error) {
	var walk func(error)
	walk = func(err error) {
		var fe *FieldError
		if j, ok := err.(interface{ Unwrap() []error }); ok { //nolint:errorlint // walks the tree itself
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		if errors.As(err, &fe) {
			fields = append(fields, fe)
		} else if err != nil {
			others = append(others, err)
		}
	}
	walk(err)
	return fields, others
}
