# Declarations of the options kernel_select adds to torch._inductor.config: every knob of
# kernel_select.options.KNOBS, under its own name, None meaning "not set here" (kernel_select.knobs
# decides), generated from the knobs' declarations.
#
# kernel_select.inductor.register_options() turns this module into a torch config module with torch's
# own install_config_module() (so the entries are built by whichever torch is installed) and copies the
# entries into torch._inductor.config._config. The annotations must be real typing objects, not strings:
# torch.compile(options=...) reads them to type-check values, and skips the check for Optional/Union
# types, leaving validation to kernel_select.options.
from kernel_select import options as _options

__annotations__ = {name: _options.torch_option_type(name) for name in _options.KNOBS}
globals().update(dict.fromkeys(_options.KNOBS))
