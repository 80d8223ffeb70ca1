#include "compiler/convplan/passes/plan_graph.h"

#include <algorithm>

namespace kiln::convplan {

namespace fe = onnx_fe;

PlanGraph::PlanGraph(ConvPlan plan) : plan_(std::move(plan)), alive_(plan_.ops.size(), true) {
  for (const fe::GraphOutput& o : plan_.outputs) {
    graph_outputs_.insert(o.tensor);
    graph_outputs_.insert(o.name);
  }
  for (size_t i = 0; i < plan_.ops.size(); ++i) EndEdit(i);
}

void PlanGraph::EndEdit(size_t i) {
  if (!alive_.at(i)) return;
  for (const std::string& in : plan_.ops[i].Inputs()) {
    std::vector<size_t>& r = readers_[in];
    auto it = std::lower_bound(r.begin(), r.end(), i);
    if (it == r.end() || *it != i) r.insert(it, i);
  }
  for (const std::string& o : plan_.ops[i].Outputs()) writer_[o] = i;
}

void PlanGraph::BeginEdit(size_t i) {
  for (const std::string& in : plan_.ops.at(i).Inputs()) {
    auto f = readers_.find(in);
    if (f == readers_.end()) continue;
    auto it = std::lower_bound(f->second.begin(), f->second.end(), i);
    if (it != f->second.end() && *it == i) f->second.erase(it);
  }
  for (const std::string& o : plan_.ops[i].Outputs()) {
    auto w = writer_.find(o);
    if (w != writer_.end() && w->second == i) writer_.erase(w);
  }
}

std::vector<size_t> PlanGraph::Consumers(std::string_view tensor) const {
  auto it = readers_.find(std::string(tensor));
  return it == readers_.end() ? std::vector<size_t>{} : it->second;
}

std::optional<size_t> PlanGraph::Producer(std::string_view tensor) const {
  auto it = writer_.find(std::string(tensor));
  if (it == writer_.end()) return std::nullopt;
  return it->second;
}

bool PlanGraph::IsGraphOutput(std::string_view tensor) const {
  return graph_outputs_.count(std::string(tensor)) != 0;
}

const fe::ConstantData* PlanGraph::Constant(std::string_view tensor) const {
  return plan_.FindConstant(std::string(tensor));
}

const fe::Tensor* PlanGraph::FindTensor(std::string_view tensor) const {
  return plan_.model ? plan_.model->graph().FindTensor(tensor) : nullptr;
}

bool PlanGraph::OnlyReadBy(std::string_view tensor, size_t reader) const {
  if (IsGraphOutput(tensor) || Constant(tensor) != nullptr) return false;
  std::vector<size_t> c = Consumers(tensor);
  return c.size() == 1 && c[0] == reader;
}

void PlanGraph::Remove(size_t i) {
  BeginEdit(i);
  alive_.at(i) = false;
}

void PlanGraph::MoveTo(size_t from, size_t to) {
  BeginEdit(from);
  if (from != to) {
    plan_.ops.at(to) = std::move(plan_.ops.at(from));
    alive_.at(to) = true;
    alive_.at(from) = false;
  }
  EndEdit(to);
}

ConvPlan PlanGraph::Compact() && {
  std::vector<PlanOp> ops;
  for (size_t i = 0; i < plan_.ops.size(); ++i) {
    if (alive_[i]) ops.push_back(std::move(plan_.ops[i]));
  }
  plan_.ops = std::move(ops);
  alive_.assign(plan_.ops.size(), true);
  return std::move(plan_);
}

}  // namespace kiln::convplan
