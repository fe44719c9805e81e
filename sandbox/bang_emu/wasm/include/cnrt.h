/* wasm flavour: the host API's types and declarations are the native header's (host entries compile but are never
 * linked into the device module: nothing exports them, so wasm-ld drops them with what they call). */
#include "../../include/cnrt.h"
