#pragma once
// The user's `file.py:line` that submitted an operation (call_site.cc). GIL held.
#include <string>

namespace hora::bindings {

// The site this thread was given (give_call_site), else `file.py:line` of the calling Python
// frame, or of the first frame above it outside Hora and the frameworks (else the first outside
// Hora, else ""); `skip`: frames above the caller's that are certainly Hora's, not looked at.
std::string callSite(int skip);

}  // namespace hora::bindings
