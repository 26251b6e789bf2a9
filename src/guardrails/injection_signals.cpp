#include "guardrails/injection_signals.h"

namespace tahua::guardrails {
namespace {

// Bounded gaps only (`.{0,40}`): a signal's match stays short. Weights: 1.0 alone is
// enough at the default threshold (0.5); 0.3 signals need company.
constexpr InjectionSignal kSignals[] = {
    // Overriding what came before.
    {R"(\b(?:ignore|disregard|forget|skip|bypass|override)\s+(?:all\s+|any\s+|the\s+|your\s+|my\s+|these\s+|those\s+|of\s+)*(?:previous|prior|above|earlier|preceding|original|initial|system|safety|existing)\s+(?:instructions?|prompts?|rules|directions|guidelines|messages?|context|constraints|policies))", 1.0},
    {R"(\b(?:ignore|disregard|forget|skip|bypass|override|set\s+aside|discard|abandon)\b.{0,40}\b(?:instructions|prompts?|rules|guidelines|directives|programming|constraints|policies)\b)", 0.6},
    {R"(\b(?:disable|turn\s+off|remove|bypass|deactivate)\s+(?:your\s+|all\s+|the\s+|any\s+)?(?:safety|content|moderation)\s+(?:filters?|policies|guidelines|restrictions|checks))", 0.6},
    {R"(\b(?:ignore|disregard|forget)\s+(?:everything\s+|all\s+|the\s+text\s+|the\s+)?(?:above|before|previously|preceding)\b)", 0.6},
    {R"(\b(?:ignore|disregard|forget)\s+(?:everything|all)\s+(?:above|before|previously|you\s+(?:were|have\s+been)\s+told))", 1.0},
    {R"(\bdo\s+not\s+(?:follow|obey)\s+(?:your|the|any)\s+(?:previous\s+|system\s+|original\s+)?(?:instructions|rules|guidelines|prompt|programming))", 0.9},
    {R"(\b(?:earlier|previous|prior|above|original|system)\s+(?:instructions|rules|prompt)\s+(?:are|is)\s+(?:now\s+)?(?:void|cancell?ed|invalid|obsolete|revoked|no\s+longer))", 1.0},
    {R"(\b(?:new|real|updated)\s+(?:instructions|rules|system\s+prompt)\s*:)", 0.6},
    {R"(\b(?:from\s+now\s+on|starting\s+now)\b.{0,40}\b(?:you\s+(?:will|must|are)|respond|answer|act)\b)", 0.4},
    // Revealing the prompt.
    {R"(\b(?:reveal|print|show|repeat|output|display|leak|dump|tell\s+me|give\s+me|share|write\s+out)\b.{0,24}\b(?:system\s+prompt|system\s+message|(?:initial|hidden|secret|original)\s+(?:prompt|instructions)|instructions\s+(?:above|you\s+were\s+given)|prompt\s+above))", 1.0},
    {R"(\bwhat\s+(?:is|was|are|were)\s+(?:your|the)\s+(?:system\s+prompt|initial\s+instructions|original\s+instructions))", 0.7},
    {R"(\brepeat\s+(?:the\s+)?(?:text|words|everything|all)\s+(?:above|before)\b)", 0.8},
    // Role play without limits.
    {R"(\b(?:you\s+are\s+now|act\s+as|pretend\s+(?:to\s+be|you\s+are)|roleplay\s+as|behave\s+like)\b.{0,60}\b(?:no|without|free\s+(?:of|from)|zero)\s+(?:any\s+)?(?:restrictions|limits|limitations|rules|filters|guidelines|censorship|boundaries|ethics))", 1.0},
    {R"(\b(?:AI|assistant|model|chatbot|bot)\s+(?:with\s+no|without(?:\s+any)?)\s+(?:ethical\s+|moral\s+|content\s+|safety\s+)?(?:restrictions|limits|limitations|rules|filters|guidelines|censorship|boundaries|ethics))", 1.0},
    {R"(\bpretend\s+(?:that\s+)?you\s+(?:have|had)\s+no\s+(?:restrictions|rules|filters|limits|guidelines))", 1.0},
    {R"(\b(?:unfiltered|uncensored|unrestricted|jailbroken)\s+(?:ai|assistant|model|mode|version|chatbot))", 0.8},
    {R"(\bDAN\b.{0,40}\b(?:do\s+anything\s+now|jailbreak|no\s+restrictions))", 1.0},
    {R"(\bdo\s+anything\s+now\b)", 0.8},
    {R"(\b(?:developer|god|sudo|debug|admin)\s+mode\s+(?:enabled|activated|on)\b)", 0.9},
    {R"(\bin\s+(?:developer|god|sudo|DAN)\s+mode\b.{0,30}\byou\s+(?:can|will|must|ignore|have\s+no))", 0.6},
    {R"(\b(?:enable|activate|enter|switch\s+to)\s+(?:god|jailbreak|unrestricted|DAN)\s+mode\b)", 0.9},
    {R"(\b(?:enable|activate|enter|switch\s+to)\s+(?:developer|sudo)\s+mode\b)", 0.4},
    {R"(\bjailbreak)", 0.4},
    {R"(\b(?:stay|remain)\s+in\s+character\b)", 0.3},
    // Fake role headers and chat-template tokens.
    {R"(<\|im_start\|>\s*system|<\|system\|>|\[/?INST\]|<<SYS>>|<\|start_header_id\|>\s*system)", 1.0},
    {R"(<\|im_start\|>|<\|im_end\|>|<\|eot_id\|>|<\|endoftext\|>)", 0.6},
    {R"((?:^|\n)\s*(?:#{1,3}\s*)?(?:system|assistant)\s*(?:prompt)?\s*:\s)", 0.5},
    // Chinese (matched as bytes: a gap of 30 bytes is about ten characters, and a `?` or a
    // repeat applies to a group, never to a character, which is three bytes).
    {R"((?:忽略|无视|忘记|忘掉|不要理会|跳过|放弃).{0,30}(?:指令|指示|提示词|规则|设定|限制|约束|命令|要求))", 1.0},
    {R"((?:不要|别|不再|无需)(?:再)?(?:遵守|遵循|服从|理会).{0,18}(?:指令|规则|设定|限制|要求))", 0.9},
    {R"((?:打印|输出|显示|告诉|重复|泄露|透露|说出|复述|列出|给我).{0,30}(?:系统提示|系统指令|初始指令|隐藏指令|原始指令|初始提示|预设指令))", 1.0},
    {R"((?:系统提示|系统指令|初始指令|隐藏指令|原始指令|初始提示).{0,30}(?:打印|输出|显示|告诉我|重复|泄露|透露|说出|复述|是什么))", 1.0},
    {R"((?:你现在是|你将扮演|扮演|假装你是|假装成|充当).{0,30}(?:没有|不受|无|摆脱)(?:任何)?(?:限制|约束|规则|审查|道德|过滤))", 1.0},
    {R"((?:没有|不受|不用遵守|无需遵守)(?:任何)?(?:限制|约束|规则|审查|过滤))", 0.4},
    {R"(开发者模式(?:已经|已)?(?:启用|开启|激活|打开))", 0.9},
    {R"(可以做任何事)", 0.4},
    {R"(从现在(?:起|开始).{0,30}(?:你是|扮演|无视|忽略))", 0.4},
    {R"((?:上帝|越狱|无限制|DAN)模式)", 0.9},
    {R"((?:开启|打开|进入|启用|激活|切换到)开发者模式)", 0.4},
    {R"(越狱)", 0.4},
    {R"((?:新的|新)(?:指令|规则|系统提示)\s*(?::|：))", 0.6},
    // Smuggled payloads: a long base64 blob.
    {R"([A-Za-z0-9+/]{200})", 0.4},
};

}  // namespace

std::span<const InjectionSignal> injectionSignals() { return kSignals; }

}  // namespace tahua::guardrails
