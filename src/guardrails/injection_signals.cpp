#include "guardrails/injection_signals.h"

namespace tahua::guardrails {
namespace {

// Bounded gaps only (`.{0,40}`): a signal's match stays short. Weights: 1.0 alone is
// enough at the default threshold (0.5); 0.3 signals need company.
constexpr InjectionSignal kSignals[] = {
    // Overriding what came before.
    {R"(\b(?:ignore|disregard|forget|skip|bypass|override)\s+(?:all\s+|any\s+|the\s+|your\s+|my\s+|these\s+|those\s+)*(?:previous|prior|above|earlier|preceding|original|initial|system|safety|existing)\s+(?:instructions?|prompts?|rules|directions|guidelines|messages?|context|constraints|policies))", 1.0},
    {R"(\b(?:ignore|disregard|forget)\s+(?:everything|all)\s+(?:above|before|previously|you\s+(?:were|have\s+been)\s+told))", 1.0},
    {R"(\bdo\s+not\s+follow\s+(?:your|the|any)\s+(?:previous\s+|system\s+|original\s+)?(?:instructions|rules|guidelines))", 0.9},
    {R"(\bnew\s+(?:instructions|rules|system\s+prompt)\s*:)", 0.6},
    {R"(\b(?:from\s+now\s+on|starting\s+now)\b.{0,40}\b(?:you\s+(?:will|must|are)|respond|answer|act)\b)", 0.4},
    // Revealing the prompt.
    {R"(\b(?:reveal|print|show|repeat|output|display|leak|tell\s+me)\s+(?:me\s+)?(?:your|the)\s+(?:entire\s+|full\s+|whole\s+|original\s+|hidden\s+|secret\s+)*(?:system\s+prompt|system\s+message|initial\s+instructions|hidden\s+instructions|instructions\s+above|prompt\s+above))", 1.0},
    {R"(\bwhat\s+(?:is|was|are|were)\s+(?:your|the)\s+(?:system\s+prompt|initial\s+instructions|original\s+instructions))", 0.7},
    // Role play without limits.
    {R"(\b(?:you\s+are\s+now|act\s+as|pretend\s+(?:to\s+be|you\s+are)|roleplay\s+as|behave\s+like)\b.{0,60}\b(?:no|without|free\s+(?:of|from)|zero)\s+(?:restrictions|limits|limitations|rules|filters|guidelines|censorship|boundaries|ethics))", 1.0},
    {R"(\b(?:unfiltered|uncensored|unrestricted|jailbroken)\s+(?:ai|assistant|model|mode|version|chatbot))", 0.8},
    {R"(\bDAN\b.{0,40}\b(?:do\s+anything\s+now|jailbreak|no\s+restrictions))", 1.0},
    {R"(\bdo\s+anything\s+now\b)", 0.8},
    {R"(\b(?:developer|god|sudo|debug|admin)\s+mode\s+(?:enabled|activated|on)\b)", 0.9},
    {R"(\b(?:enable|activate|enter|switch\s+to)\s+(?:developer|god|sudo|jailbreak|unrestricted)\s+mode\b)", 0.9},
    {R"(\bjailbreak)", 0.4},
    {R"(\b(?:stay|remain)\s+in\s+character\b)", 0.3},
    // Fake role headers and chat-template tokens.
    {R"(<\|im_start\|>\s*system|<\|system\|>|\[/?INST\]|<<SYS>>|<\|start_header_id\|>\s*system)", 1.0},
    {R"((?:^|\n)\s*(?:#{1,3}\s*)?(?:system|assistant)\s*(?:prompt)?\s*:\s)", 0.5},
    // Chinese.
    {R"((?:忽略|无视|忘记|忘掉|不要理会|跳过)(?:掉)?(?:你|您)?(?:之前|以上|上面|前面|先前|此前|所有|全部|原来|原有)(?:的|所有的|全部的)?(?:所有|全部|一切)?(?:指令|指示|提示|提示词|规则|要求|设定|限制|约束|命令))", 1.0},
    {R"((?:不要|别|不再)(?:再)?(?:遵守|遵循|服从|理会)(?:你的|之前的|原来的|系统的)?(?:指令|规则|设定|限制|要求))", 0.9},
    {R"((?:输出|显示|告诉我|重复|打印|泄露|透露|说出)(?:一下)?(?:你的|您的)?(?:完整的|全部的|原始的)?(?:系统提示|系统提示词|系统指令|初始指令|初始提示|隐藏指令|原始指令))", 1.0},
    {R"((?:你现在是|你将扮演|扮演|假装你是|假装成|充当).{0,30}(?:没有|不受|无|摆脱|不受任何)(?:任何)?(?:限制|约束|规则|审查|道德|过滤))", 1.0},
    {R"((?:开发者|上帝|越狱|无限制)模式)", 0.9},
    {R"(越狱)", 0.4},
    {R"(新的?(?:指令|规则|系统提示)\s*[:：])", 0.6},
    // Smuggled payloads: a long base64 blob.
    {R"([A-Za-z0-9+/]{200})", 0.4},
};

}  // namespace

std::span<const InjectionSignal> injectionSignals() { return kSignals; }

}  // namespace tahua::guardrails
