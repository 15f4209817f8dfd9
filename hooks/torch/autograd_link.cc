#include "hooks/torch/autograd_link.h"

#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>
#include <c10/util/Type.h>
#include <torch/csrc/autograd/function.h>

#include <mutex>
#include <string>
#include <typeindex>
#include <typeinfo>
#include <unordered_map>

#include "hooks/gpumem.h"

namespace gpumem::torch {
namespace {

// The frame naming a node type, interned once per type. The name comes from the type
// itself ("torch::autograd::generated::MmBackward0" -> "MmBackward0"), not from
// Node::name(): a Python-defined Function's name() takes the GIL. Those show as "PyNode".
std::uint32_t NodeFrame(const ::torch::autograd::Node& node) {
  // Backward allocates many times per node type in a row: skip the lock for a repeat.
  thread_local const std::type_info* last_type = nullptr;
  thread_local std::uint32_t last_frame = 0;
  if (last_type == &typeid(node)) return last_frame;
  static std::mutex mu;
  static auto* frames = new std::unordered_map<std::type_index, std::uint32_t>;
  const std::type_index type(typeid(node));
  std::lock_guard<std::mutex> lock(mu);
  auto it = frames->find(type);
  if (it != frames->end()) {
    last_type = &typeid(node);
    last_frame = it->second;
    return it->second;
  }
  std::string name = c10::demangle(type.name());
  if (std::size_t colons = name.rfind("::"); colons != std::string::npos) {
    name.erase(0, colons + 2);
  }
  const std::uint32_t frame = gpumem_autograd_node_frame(name.c_str());
  if (frame != 0) {
    frames->emplace(type, frame);
    last_type = &typeid(node);
    last_frame = frame;
  }
  return frame;
}

}  // namespace

void LinkNextAllocationToAutograd() {
  // Set by the engine (NodeGuard) on the thread running a node, whatever the mode.
  const std::shared_ptr<::torch::autograd::Node> node = ::torch::autograd::get_current_node();
  if (node != nullptr) {
    gpumem_set_autograd_link(node->sequence_nr(), node->thread_id(), NodeFrame(*node));
  } else {
    gpumem_set_autograd_link(at::sequence_number::peek(), at::RecordFunction::currentThreadId(),
                             0);
  }
}

}  // namespace gpumem::torch
