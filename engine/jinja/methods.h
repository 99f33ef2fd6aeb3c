// The str and dict methods chat templates call (`message.content.strip()`,
// `message.get('x')`, `tool.items()`), with Python's semantics. Mutating methods do not exist,
// as in Jinja2's ImmutableSandboxedEnvironment.
#ifndef TANDEM_ENGINE_JINJA_METHODS_H_
#define TANDEM_ENGINE_JINJA_METHODS_H_

#include <string>

#include "engine/jinja/value.h"

namespace tandem::jinja {

// Whether `object.name` is a supported method.
bool IsMethod(const Value& object, const std::string& name);
// `object.name` as a callable bound to (a copy of) `object`.
Value BindMethod(const Value& object, const std::string& name);

}  // namespace tandem::jinja

#endif  // TANDEM_ENGINE_JINJA_METHODS_H_
