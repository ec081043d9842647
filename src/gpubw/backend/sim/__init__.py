"""The simulated backend: a modelled GPU system in pure Python (CI, and ``gpubw --simulate``).

:class:`~gpubw.backend.sim.backend.SimulatedBackend` implements the whole
:class:`gpubw.backend.base.Backend` facade over a :class:`~gpubw.backend.sim.model.SimSystem`
model, so the measurement protocol, the buffers and every testcase run unchanged without a
GPU. Nothing here is measured: every figure it produces comes from the model, and every
report made with it says "simulated". Build one from a preset or a JSON system file with
:func:`gpubw.backend.sim.presets.from_preset`.

The parts, each in its own module (the package itself exports nothing):

* :mod:`~gpubw.backend.sim.backend` - the facade (:class:`SimulatedBackend`: the host's
  virtual clock, argument checks, which devices it shows) and :class:`SimEngine`, the
  modelled system that the rank views of a simulated multinode run share;
* :mod:`~gpubw.backend.sim.streams` - the facade's streams and events;
* :mod:`~gpubw.backend.sim.model` - the system model (devices, links, latencies, overheads)
  and the paths bytes take through it;
* :mod:`~gpubw.backend.sim.memory` - the allocator, and allocation content: real bytes for
  small allocations, exact symbolic content for large ones;
* :mod:`~gpubw.backend.sim.engine` - the discrete-event device side: streams, events, the
  device clock; :mod:`~gpubw.backend.sim.rates` - the flows of copies and how they share
  links and host memory;
* :mod:`~gpubw.backend.sim.kernels` - kernel emulation, a table keyed by kernel name;
  :mod:`~gpubw.backend.sim.plugin_kernels` - plugin kernels through their modules' simulate
  functions;
* :mod:`~gpubw.backend.sim.faults` - fault injection (:class:`Faults`). Each fault surfaces the
  way it does on real hardware;
* :mod:`~gpubw.backend.sim.sharing` - memory shared across ranks (export/import tokens,
  multicast objects);
* :mod:`~gpubw.backend.sim.facts` - the model's NVML-like facts;
* :mod:`~gpubw.backend.sim.presets` - the built-in systems, and loading a system by name or
  from a JSON file;
* :mod:`~gpubw.backend.sim.system_checks` - a system file's JSON text and the checks of its
  values; :mod:`~gpubw.backend.sim.system_file` - the :class:`SimSystem` a file makes.

The simulator (every module above but the last three) never imports the presets or the
system file modules: those build on it.
"""
